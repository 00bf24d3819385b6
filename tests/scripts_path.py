"""Make ``scripts/localservices.py`` importable from tests (scripts/ is not a package)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))

from localservices import (
    PostgresServer,
    RedisServer,
    free_port,
    postgres_reachable_dir,
    wait_for_port,
)

__all__ = [
    "PostgresServer",
    "RedisServer",
    "free_port",
    "postgres_reachable_dir",
    "wait_for_port",
]
