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
    fields = await stored(store, "topic", "t")
    produced = sum(int(v) for k, v in fields.items() if k.endswith(b":p") and k != b"day:p")
    assert produced == 3 and fields[b"day:p"] == b"3"  # the minutes, and the day's total
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


async def test_a_days_totals_add_up_its_minutes_and_stay_out_of_them(store):
    """``day:<field>`` totals grow with every flush; the per-minute view never shows them;
    thousands of names are read a batch of fields at a time."""
    now = [1_700_000_000.0 - 1_700_000_000.0 % 86_400 + 3600]  # 01:00 UTC
    counters = Counters(store, lambda: now[0], interval_s=60)
    counters.record(topic="t", app="a", broker=1, produced=2, produced_bytes=20)
    await counters.flush()
    now[0] += 120  # two minutes later, the same day
    counters.record(topic="t", app="a", broker=1, produced=3, produced_bytes=30, consumed=4)
    counters.record(topic="u", app="a", broker=1, consumed=1, consumed_bytes=7)
    await counters.flush()
    day = _day(int(now[0] // 60))
    names = ["t", "u", "never"] + [f"x{i}" for i in range(1200)]  # past one batch
    totals = await counters.day_totals("topic", names, day)
    assert sorted(totals) == ["t", "u"]
    t = totals["t"]
    assert (t.produced, t.produced_bytes, t.consumed, t.consumed_bytes) == (5, 50, 4, 0)
    assert t.minute_ms == (now[0] - now[0] % 86_400) * 1000  # the day's start
    assert (await counters.day_totals("app", ["a"], day))["a"].produced == 5
    start_ms = int(now[0] - 600) * 1000
    minutes = await counters.traffic("topic", "t", start_ms, start_ms + 1_200_000)
    assert [(m.produced, m.consumed) for m in minutes] == [(2, 0), (3, 4)]
    await counters.close()
