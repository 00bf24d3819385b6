"""``queue_publish_many``: several queue messages in one round trip, each treated exactly as
``queue_publish`` would treat it (order, priority, overflow policies, per-message errors)."""

from __future__ import annotations

import pytest

from brokers.engine import (
    AppendResult,
    Message,
    MessageTooLarge,
    QueueFull,
    QueueSettings,
    TopicNotFound,
)
from tests.engine.conftest import snapshot


def queue_snap(**settings) -> object:
    return snapshot(topics={"q": {"partitions": 1, "queue": QueueSettings(**settings)}})


async def test_batch_keeps_order_indexes_and_priority(make_engine):
    engine = make_engine(queue_snap())
    await engine.queue_publish("q", "a", Message(b"first"))
    results = await engine.queue_publish_many("q", "a", [Message(b"%d" % i) for i in range(5)])
    assert [r.first_index for r in results] == [1, 2, 3, 4, 5]
    got = await engine.queue_take("q", "a", count=10)
    assert [d.message.body for d in got] == [b"first", b"0", b"1", b"2", b"3", b"4"]
    assert [d.index for d in got] == list(range(6))
    assert await engine.bounds("q", 0) == (0, 6)
    await engine.queue_publish("q", "a", Message(b"after"))  # the single path continues
    assert [d.index for d in await engine.queue_take("q", "a")] == [6]

    prio = make_engine(
        snapshot(
            topics={"p": {"partitions": 1, "queue": QueueSettings(delivery_mode="PriorityBased")}}
        )
    )
    batch = [(b"low", 0), (b"n1", 1), (b"crit", 3), (b"n2", 1), (b"high", 2)]
    await prio.queue_publish_many("p", "a", [Message(b, priority=p) for b, p in batch])
    got = await prio.queue_take("p", "a", count=10)
    assert [d.message.body for d in got] == [b"crit", b"high", b"n1", b"n2", b"low"]


async def test_empty_batch(make_engine):
    engine = make_engine(queue_snap())
    assert await engine.queue_publish_many("q", "a", []) == []
    assert (await engine.queue_stats("q")).ready == 0


@pytest.mark.parametrize("policy", ["DropOldest", "DropNewest", "BlockPublisher", "RedirectToDlq"])
async def test_overflow_policies_apply_per_message(make_engine, policy):
    """Five messages into a queue bounded at 3 end up as five single publishes would."""
    batched = make_engine(queue_snap(max_queue_size=3, overflow_policy=policy))
    results = await batched.queue_publish_many("q", "a", [Message(b"%d" % i) for i in range(5)])
    stored = [r for r in results if isinstance(r, AppendResult) and r.count]
    assert [r.first_index for r in stored] == (
        [0, 1, 2, 3, 4] if policy == "DropOldest" else [0, 1, 2]
    )
    if policy == "BlockPublisher":
        assert [type(r) for r in results[3:]] == [QueueFull, QueueFull]
    else:
        assert all(isinstance(r, AppendResult) for r in results)
        assert [r.dropped for r in results[3:]] == [policy == "DropNewest"] * 2
        assert [r.dead_lettered for r in results[3:]] == [policy == "RedirectToDlq"] * 2
    expected = [b"2", b"3", b"4"] if policy == "DropOldest" else [b"0", b"1", b"2"]
    assert [d.message.body for d in await batched.queue_take("q", "a", count=9)] == expected
    stats = await batched.queue_stats("q")
    assert stats.dropped == (2 if policy in ("DropOldest", "DropNewest") else 0)
    if policy == "RedirectToDlq":
        dlq = await batched.queue_take("q.dlq", "a", count=9)
        assert [d.message.body for d in dlq] == [b"3", b"4"]
        assert {d.message.attributes["deadLetterReason"] for d in dlq} == {"QueueOverflow"}
    else:  # a queue without a DLQ has none to consume
        with pytest.raises(TopicNotFound):
            await batched.queue_take("q.dlq", "a", count=9)


async def test_invalid_message_fails_alone(make_engine):
    engine = make_engine(queue_snap(), max_body=16)
    messages = [Message(b"a"), Message(b"x" * 64), Message(b"b")]
    results = await engine.queue_publish_many("q", "a", messages, client_address="1.2.3.4:5")
    assert isinstance(results[1], MessageTooLarge)
    assert [results[0].first_index, results[2].first_index] == [0, 1]
    got = await engine.queue_take("q", "a", count=5)
    assert [d.message.body for d in got] == [b"a", b"b"]
    assert all(d.message.client_address == "1.2.3.4:5" for d in got)
