"""Counted traffic, failures and refusals reach Redis within the flush interval even when
nothing is counted after them (they waited for the next count, which might never come),
and a flush that failed is tried again on its own."""

from __future__ import annotations

import asyncio
import time

from brokers.engine.counters import Counters, _day
from brokers.engine.keys import counter_key


async def stored(store, dimension: str, name: str) -> dict[bytes, bytes]:
    return await store.hgetall(counter_key(dimension, name, _day(int(time.time() // 60))))


async def test_a_last_count_lands_within_the_interval(store):
    counters = Counters(store, time.time, interval_s=0.1)
    counters.record(topic="t", app="a", broker=1, produced=1)  # flushed at once
    await asyncio.sleep(0.02)
    counters.record(topic="t", app="a", broker=1, produced=2)  # just after: waits
    counters.refused(topic="t", app="a", kind="too_large")
    counters.failed(topic="t", app="b", count=3)
    await asyncio.sleep(0.3)
    produced = sum(
        int(v) for k, v in (await stored(store, "topic", "t")).items() if k.endswith(b":p")
    )
    assert produced == 3
    assert list((await stored(store, "producer", "t:a")).values()) == [b"1"]
    assert list((await stored(store, "group", "t:b")).values()) == [b"3"]
    await counters.close()


async def test_a_failed_flush_is_tried_again(store, monkeypatch):
    counters = Counters(store, time.time, interval_s=0.05)
    real = store.pipeline
    broken = {"on": True}

    def pipeline(*args, **kwargs):
        pipe = real(*args, **kwargs)
        if broken["on"]:

            async def fail(*a, **k):
                raise ConnectionError("a Redis blip")

            pipe.execute = fail
        return pipe

    monkeypatch.setattr(store, "pipeline", pipeline)
    counters.failed(topic="t", app="c", count=2)
    await asyncio.sleep(0.1)
    broken["on"] = False
    await asyncio.sleep(0.2)
    assert list((await stored(store, "group", "t:c")).values()) == [b"2"]
    await counters.close()
