"""A serving process's report is withdrawn when it stops, even when the publishing task
loses the cancellation (the race that left a stopping proxy hung, killed by its
supervisor and alerting "proxy down")."""

from __future__ import annotations

import asyncio
from typing import Any

import redis.asyncio as aioredis

from brokers.engine import read_reports
from proxy.httpmq.report import BOARD, ProcessReport


class SwallowingRedis:
    """A Redis client whose first HSET loses the cancellation it gets: it waits, and when
    cancelled carries on as a command whose timeout fired at that moment would."""

    def __init__(self, real: aioredis.Redis) -> None:
        self.real = real
        self.swallowed = 0
        self.started = asyncio.Event()

    async def hset(self, *args: Any) -> Any:
        if not self.swallowed:
            self.started.set()
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                self.swallowed += 1
        return await self.real.hset(*args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


class FakeEngine:
    """The two figures a report reads, on a real Redis."""

    def __init__(self, redis: Any) -> None:
        self.redis = redis
        self.catalog = type("Catalog", (), {"version": 7})()
        self.durability = type("Durability", (), {"latency": self})()

    def summary(self) -> dict[str, int]:
        return {}


async def test_a_lost_cancellation_does_not_keep_the_report(redis_client):
    redis = SwallowingRedis(redis_client)
    report = ProcessReport(FakeEngine(redis), "127.0.0.1", 4100, 0, every_s=0.05)  # type: ignore[arg-type]
    report.start()
    await asyncio.wait_for(redis.started.wait(), 5)
    loop = asyncio.get_running_loop()
    began = loop.time()
    await asyncio.wait_for(report.stop(), 5)
    assert loop.time() - began < 2, "a single cancel waited here for ever"
    assert redis.swallowed == 1
    # Only this report: a server of another test of the session may be reporting beside it.
    assert report.name not in await read_reports(redis_client, board=BOARD)
    assert not await redis_client.hexists(f"mq:reports:{BOARD}", report.name)
