"""Recovery fixtures: a Redis the test owns (killed and restarted at will)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.recovery.redis_server import OwnRedis


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[OwnRedis]:
    """A started :class:`OwnRedis`, stopped after the test."""
    server = OwnRedis(tmp_path / "redis")
    server.start()
    try:
        yield server
    finally:
        server.stop()
