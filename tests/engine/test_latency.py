"""The store write times a process reports: the last minute's count, slowest write and
99th percentile (a bucket's bound, never below the true one nor above the slowest), and
what a write through the engine adds."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from brokers.engine import Message
from brokers.engine.latency import LatencyWindow
from tests.engine.conftest import FakeClock


def test_a_minute_of_writes_and_then_none():
    clock = FakeClock(1_000.0)
    window = LatencyWindow(clock)
    assert window.summary() == {"count": 0, "p99_ms": 0.0, "max_ms": 0.0}
    for _ in range(99):
        window.add(0.003)
    window.add(0.450)
    clock.advance(30)
    window.add(0.001)
    assert window.summary() == {"count": 101, "p99_ms": 5.0, "max_ms": 450.0}
    clock.advance(35)  # the slow write's slot is over a minute old, the 1 ms one is not
    assert window.summary() == {"count": 1, "p99_ms": 1.0, "max_ms": 1.0}
    clock.advance(60)
    assert window.summary()["count"] == 0


def test_writes_slower_than_every_bucket_report_the_slowest():
    window = LatencyWindow(FakeClock())
    for seconds in (7.5, 9.0):
        window.add(seconds)
    assert window.summary() == {"count": 2, "p99_ms": 9000.0, "max_ms": 9000.0}


@given(st.lists(st.floats(0, 10), min_size=1, max_size=300), st.floats(0, 59))
def test_the_reported_p99_bounds_the_true_one(latencies, spread):
    clock = FakeClock(5_000.0)
    window = LatencyWindow(clock)
    for i, seconds in enumerate(latencies):
        window.add(seconds, clock.now + spread * i / len(latencies))
    clock.advance(spread)
    got = window.summary()
    ordered = sorted(ms * 1000 for ms in latencies)
    true_p99 = ordered[math.ceil(0.99 * len(ordered)) - 1]
    assert got["count"] == len(latencies)
    assert got["max_ms"] == round(ordered[-1], 1)
    assert round(true_p99, 1) <= got["p99_ms"] <= got["max_ms"]


async def test_every_store_write_is_timed(make_engine):
    engine = make_engine()
    before = engine.durability.latency.summary()["count"]
    await engine.append("t", "a", [Message(b"x")], partition=0)
    await engine.append_many("t", "a", [Message(b"y"), Message(b"z")])
    after = engine.durability.latency.summary()
    assert after["count"] > before and after["max_ms"] > 0
