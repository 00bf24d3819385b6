"""Which wait a qos level gets on which server (issue 20 item 6): WAITAOF where Redis ≥ 7.2
or Valkey has it; on Redis 7.0, nothing more (appendfsync always makes every reply follow
its fsync; with everysec PERSISTED degrades, logged once)."""

from __future__ import annotations

import logging

import pytest

from brokers.engine.model import QoS
from brokers.engine.redisio import Durability


class FakeServer:
    """What Durability asks a server: INFO and CONFIG GET appendfsync."""

    def __init__(self, info: dict, appendfsync: str = "everysec") -> None:
        self._info, self._fsync = info, appendfsync

    async def info(self, section: str = "all") -> dict:
        return self._info

    async def config_get(self, name: str) -> dict:
        return {name: self._fsync}


async def _wait(info: dict, qos: QoS, appendfsync: str = "everysec") -> tuple | None:
    durability = Durability(FakeServer(info, appendfsync), timeout_ms=1234)  # type: ignore[arg-type]
    return durability._wait_command(qos, await durability._probe(None))


@pytest.mark.parametrize(
    "info",
    [
        {"redis_version": "7.2.4", "aof_enabled": 1},
        {"redis_version": "8.0.2", "aof_enabled": 1},
        {"redis_version": "7.2.4", "valkey_version": "8.1.1", "aof_enabled": 1},
    ],
)
async def test_persisted_waits_for_the_fsync_where_waitaof_exists(info):
    assert await _wait(info, QoS.PERSISTED) == ("WAITAOF", 1, 0, 1234)
    assert await _wait(info, QoS.RECEIVED) is None


async def test_redis_7_0_with_appendfsync_always_needs_no_wait(caplog):
    info = {"redis_version": "7.0.15", "aof_enabled": 1}
    with caplog.at_level(logging.WARNING):
        assert await _wait(info, QoS.PERSISTED, "always") is None
    assert not caplog.records


async def test_redis_7_0_with_everysec_says_once_that_persisted_degrades(caplog):
    info = {"redis_version": "7.0.15", "aof_enabled": 1}
    with caplog.at_level(logging.WARNING):
        assert await _wait(info, QoS.PERSISTED) is None
    assert "PERSISTED means written to the AOF file" in caplog.text
