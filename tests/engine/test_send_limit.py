"""A topic's send limit (console-features "broker-side per-topic send limit", edited
live): all its producers together get at most that many messages a second, on every
produce path and protocol, beside each producer's own rate limit; what the topic's limit
refuses costs the producer none of its own permits; a catalog change applies at once."""

from __future__ import annotations

import pytest

from brokers.engine import AppendResult, Message, RateLimited
from tests.engine.conftest import snapshot


def catalog(send_limit: int | None = 4, b_rate: int | None = None):
    b = {"topic": "t", "app": "b"}
    if b_rate:
        b["rate_limit"] = b_rate
    return snapshot(
        topics={"t": {"partitions": 1, "send_limit": send_limit}},
        producers=[{"topic": "t", "app": "a"}, b],
    )


async def stored(engine) -> int:
    low, high = await engine.bounds("t", 0)
    return high - low


async def test_all_producers_together_stay_under_the_topics_limit(make_engine, clock):
    engine = make_engine(catalog(send_limit=4))
    await engine.append("t", "a", [Message(b"1"), Message(b"2")])
    await engine.append("t", "b", [Message(b"3"), Message(b"4")])
    with pytest.raises(RateLimited) as refused:
        await engine.append("t", "a", [Message(b"5")])
    assert "topic t is over its 4/s send limit" in str(refused.value)
    assert refused.value.retry_after_ms > 0
    with pytest.raises(RateLimited):
        await engine.append_delayed("t", "b", Message(b"6"), deliver_at_ms=engine.now_ms())
    assert await stored(engine) == 4
    clock.advance(1.0)  # a second later the bucket is full again
    await engine.append("t", "b", [Message(b"7")])
    assert await stored(engine) == 5


async def test_append_many_stores_what_the_topic_admits(make_engine):
    engine = make_engine(catalog(send_limit=3))
    results = await engine.append_many("t", "a", [Message(b"%d" % i) for i in range(5)])
    kinds = [type(r) for r in results]
    assert kinds == [AppendResult] * 3 + [RateLimited] * 2
    assert "send limit" in str(results[-1])


async def test_the_topics_refusal_costs_the_producer_nothing(make_engine):
    engine = make_engine(catalog(send_limit=2, b_rate=3))
    await engine.append("t", "a", [Message(b"a1"), Message(b"a2")])  # the topic is spent
    for _ in range(3):
        with pytest.raises(RateLimited, match="send limit"):
            await engine.append("t", "b", [Message(b"b")])
    engine.set_snapshot(catalog(send_limit=None, b_rate=3))  # the topic's limit lifted
    # no time passed, and b's own 3 permits are all there: the refusals took none
    results = await engine.append_many("t", "b", [Message(b"%d" % i) for i in range(4)])
    assert [type(r) for r in results] == [AppendResult] * 3 + [RateLimited]
    assert "producer b.t is over its 3/s limit" in str(results[-1])


async def test_a_catalog_change_applies_at_once(make_engine):
    engine = make_engine(catalog(send_limit=1))
    await engine.append("t", "a", [Message(b"1")])
    with pytest.raises(RateLimited):
        await engine.append("t", "a", [Message(b"2")])
    engine.set_snapshot(catalog(send_limit=None))  # the limit lifted
    for i in range(20):
        await engine.append("t", "a", [Message(b"%d" % i)])
    assert await stored(engine) == 21
