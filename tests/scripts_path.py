"""Make ``scripts/`` modules importable from tests (scripts/ is not a package)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))

import build_cache
from localservices import (
    PostgresServer,
    RedisServer,
    free_port,
    postgres_reachable_dir,
    wait_for_port,
)
from supervisor_conf import parse_procfile, render

__all__ = [
    "PostgresServer",
    "RedisServer",
    "build_cache",
    "free_port",
    "parse_procfile",
    "postgres_reachable_dir",
    "render",
    "wait_for_port",
]
