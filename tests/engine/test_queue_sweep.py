"""Queue additions for the VibeMQ server: the TTL sweep of a 0-message take and
dead-lettering a copy held outside the queue (fan-out)."""

from __future__ import annotations

from brokers.engine import Message, QueueSettings
from tests.engine.conftest import snapshot


def queue_snap(**settings) -> object:
    return snapshot(topics={"q": {"partitions": 1, "queue": QueueSettings(**settings)}})


async def test_zero_take_sweeps_expired_heads_of_every_band(make_engine, clock):
    engine = make_engine(
        queue_snap(message_ttl_ms=1000, dead_letter_enabled=True, delivery_mode="PriorityBased")
    )
    await engine.queue_publish("q", "a", Message(b"low", priority=0))
    await engine.queue_publish("q", "a", Message(b"high", priority=2))
    clock.advance(0.5)
    await engine.queue_publish("q", "a", Message(b"fresh", priority=0))
    clock.advance(0.6)
    assert await engine.queue_sweep("q") is None  # a sweep delivers nothing
    stats = await engine.queue_stats("q")
    assert stats.ready == 1 and stats.dead_pending == 0
    dead = await engine.queue_take("q.dlq", "a", count=5)
    assert sorted(d.message.body for d in dead) == [b"high", b"low"]
    assert {d.message.attributes["deadLetterReason"] for d in dead} == {"MessageExpired"}
    [live] = await engine.queue_take("q", "a", count=5)
    assert live.message.body == b"fresh"


async def test_sweep_without_ttl_keeps_messages(make_engine, clock):
    engine = make_engine(queue_snap())
    await engine.queue_publish("q", "a", Message(b"x"))
    clock.advance(3600)
    await engine.queue_sweep("q")
    assert (await engine.queue_stats("q")).ready == 1


async def test_dead_letter_copy(make_engine):
    with_dlq = make_engine(queue_snap(dead_letter_enabled=True))
    await with_dlq.queue_publish("q", "a", Message(b"m", attributes={"k": "v"}))
    [d] = await with_dlq.queue_take("q", "a")
    assert await with_dlq.queue_dead_letter("q", d.record, reason="MaxRetriesExceeded", attempts=4)
    [dead] = await with_dlq.queue_take("q.dlq", "a")
    attrs = dead.message.attributes
    assert attrs["k"] == "v" and attrs["deliveryAttempts"] == "4"
    assert attrs["originalQueue"] == "q" and attrs["deadLetterReason"] == "MaxRetriesExceeded"
    without = make_engine(queue_snap())
    assert not await without.queue_dead_letter("q", d.record, reason="MessageExpired", attempts=1)
    assert (await without.queue_stats("q")).dropped == 1


async def test_engine_queue_retry_backoff_is_configurable(make_engine, clock):
    from brokers.engine import QueueRetry

    engine = make_engine(queue_snap(), queue_retry=QueueRetry(100, 150))
    await engine.queue_publish("q", "a", Message(b"x"))
    [d] = await engine.queue_take("q", "a", lease_ms=1000)
    await engine.queue_fail("q", [d.index])
    clock.advance(0.099)
    assert await engine.queue_take("q", "a") == []
    clock.advance(0.002)
    [again] = await engine.queue_take("q", "a", lease_ms=1000)
    assert again.attempts == 2
    await engine.queue_fail("q", [again.index])
    clock.advance(0.151)  # 100 ms · 2 capped at 150 ms
    assert [d.attempts for d in await engine.queue_take("q", "a")] == [3]
