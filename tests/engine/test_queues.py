"""VibeMQ queue features: priority, TTL, max size and overflow, retry and DLQ."""

from __future__ import annotations

import pytest

from brokers.engine import Message, QueueFull, QueueSettings, TopicNotFound
from tests.engine.conftest import snapshot


def queue_snap(**settings) -> object:
    return snapshot(topics={"q": {"partitions": 1, "queue": QueueSettings(**settings)}})


async def test_fifo_and_priority_order(make_engine):
    engine = make_engine(queue_snap(delivery_mode="PriorityBased"))
    for body, prio in [(b"low", 0), (b"n1", 1), (b"crit", 3), (b"n2", 1), (b"high", 2)]:
        await engine.queue_publish("q", "a", Message(body, priority=prio))
    got = await engine.queue_take("q", "a", count=10)
    assert [d.message.body for d in got] == [b"crit", b"high", b"n1", b"n2", b"low"]
    assert all(d.attempts == 1 for d in got)
    fifo = make_engine(snapshot(topics={"f": {"partitions": 1, "queue": QueueSettings()}}))
    for body, prio in [(b"1", 0), (b"2", 3), (b"3", 1)]:
        await fifo.queue_publish("f", "a", Message(body, priority=prio))
    assert [d.message.body for d in await fifo.queue_take("f", "a", count=10)] == [b"1", b"2", b"3"]


async def test_ack_timeout_retries_with_backoff_then_dlq(make_engine, clock):
    engine = make_engine(queue_snap(max_retry_attempts=2, dead_letter_enabled=True))
    await engine.queue_publish("q", "a", Message(b"job", attributes={"k": "v"}))
    [d] = await engine.queue_take("q", "a", lease_ms=30_000)
    assert await engine.queue_take("q", "a") == []  # in flight
    assert (await engine.queue_stats("q")).in_flight == 1
    clock.advance(31)
    assert await engine.queue_take("q", "a") == []  # failed attempt 1: retry in 2 s
    clock.advance(2)
    [d2] = await engine.queue_take("q", "a", lease_ms=1000)
    assert (d2.index, d2.attempts) == (d.index, 2)
    assert await engine.queue_fail("q", [d2.index]) == 1  # attempt 2 failed: retry in 4 s
    clock.advance(3.9)
    assert await engine.queue_take("q", "a") == []
    clock.advance(0.2)
    [d3] = await engine.queue_take("q", "a")
    assert d3.attempts == 3
    await engine.queue_fail("q", [d3.index])  # past max_retry_attempts: dead-lettered
    stats = await engine.queue_stats("q")
    assert (stats.ready, stats.in_flight, stats.delayed, stats.dead_pending) == (0, 0, 0, 0)
    [dead] = await engine.queue_take("q.dlq", "a")
    msg = dead.message
    assert msg.body == b"job" and msg.attributes["k"] == "v"
    assert msg.attributes["deadLetterReason"] == "MaxRetriesExceeded"
    assert (msg.attributes["originalQueue"], msg.attributes["deliveryAttempts"]) == ("q", "3")


async def test_ack_settles_and_release_requeues_at_head(make_engine):
    engine = make_engine(queue_snap())
    for i in range(3):
        await engine.queue_publish("q", "a", Message(b"%d" % i))
    a, b = await engine.queue_take("q", "a", count=2)
    assert await engine.queue_ack("q", [a.index]) == 1
    assert await engine.queue_ack("q", [a.index]) == 0  # already settled: ignored
    assert await engine.queue_release("q", [b.index]) == 1
    again = await engine.queue_take("q", "a", count=5)
    assert [(d.index, d.attempts) for d in again] == [(b.index, 1), (2, 1)]


async def test_ttl_expiry(make_engine, clock):
    engine = make_engine(queue_snap(message_ttl_ms=1000, dead_letter_enabled=True))
    await engine.queue_publish("q", "a", Message(b"old"))
    clock.advance(0.5)
    await engine.queue_publish("q", "a", Message(b"fresh"))
    clock.advance(0.6)
    got = await engine.queue_take("q", "a", count=5)
    assert [d.message.body for d in got] == [b"fresh"]
    [dead] = await engine.queue_take("q.dlq", "a")
    assert dead.message.attributes["deadLetterReason"] == "MessageExpired"
    dropping = make_engine(
        snapshot(topics={"z": {"partitions": 1, "queue": QueueSettings(message_ttl_ms=10)}})
    )
    await dropping.queue_publish("z", "a", Message(b"x"))
    clock.advance(1)
    assert await dropping.queue_take("z", "a") == []
    assert (await dropping.queue_stats("z")).dropped == 1  # counted, not silent


@pytest.mark.parametrize("policy", ["DropOldest", "DropNewest", "BlockPublisher", "RedirectToDlq"])
async def test_overflow_policies(make_engine, policy):
    engine = make_engine(queue_snap(max_queue_size=2, overflow_policy=policy))
    for body in (b"1", b"2"):
        await engine.queue_publish("q", "a", Message(body))
    if policy == "BlockPublisher":
        with pytest.raises(QueueFull):
            await engine.queue_publish("q", "a", Message(b"3"))
        expected = [b"1", b"2"]
    else:
        res = await engine.queue_publish("q", "a", Message(b"3"))
        assert res.dropped == (policy == "DropNewest")
        assert res.dead_lettered == (policy == "RedirectToDlq")
        expected = [b"2", b"3"] if policy == "DropOldest" else [b"1", b"2"]
    assert [d.message.body for d in await engine.queue_take("q", "a", count=5)] == expected
    stats = await engine.queue_stats("q")
    assert stats.dropped == (1 if policy in ("DropOldest", "DropNewest") else 0)
    if policy == "RedirectToDlq":
        dlq = await engine.queue_take("q.dlq", "a")
        assert dlq[0].message.attributes["deadLetterReason"] == "QueueOverflow"
    else:  # a queue without a DLQ has none to consume
        with pytest.raises(TopicNotFound):
            await engine.queue_take("q.dlq", "a")


async def test_purge(make_engine):
    engine = make_engine(queue_snap())
    await engine.queue_publish("q", "a", Message(b"1"))
    await engine.queue_publish("q", "a", Message(b"2"))
    await engine.queue_take("q", "a")
    await engine.queue_purge("q")
    assert (await engine.queue_stats("q")).message_count == 0
    assert await engine.queue_take("q", "a") == []
    assert await engine.bounds("q", 0) == (2, 2)
