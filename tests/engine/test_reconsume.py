"""Re-consuming a time span: what was stored in it goes to the consumer group's retry
store, due now, and reaches every consumer of the group — a push consumer (zbus, VibeMQ)
and a fetch (JMQ4, HTTP-MQ) alike — without the group's progress moving."""

from __future__ import annotations

import pytest

from brokers.engine import RETRY_PARTITION, InvalidMessage, Message, SpanTooLarge
from brokers.engine.sections import pull
from tests.engine.test_group_features import publish, queue_snap, take


async def test_the_span_is_copied_once_and_reaches_push_and_pull(make_engine, clock):
    engine = make_engine(queue_snap())
    await publish(engine, b"before")
    clock.advance(10)
    start = engine.now_ms()
    for i in range(5):
        await publish(engine, b"in%d" % i)
    clock.advance(10)
    end = engine.now_ms()
    await publish(engine, b"after")
    first = await take(engine, count=10)
    assert await engine.settle("q", "a", 0, [d.index for d in first]) == 7  # all consumed

    spans = await engine.reconsume_spans("q", "a", from_ms=start, to_ms=end)
    assert spans == {0: (1, 6)}
    assert await engine.reconsume("q", "a", 0, *spans[0]) == 5
    pushed = await take(engine, count=3)
    assert [d.message.body for d in pushed] == [b"in0", b"in1", b"in2"]
    assert {d.partition for d in pushed} == {RETRY_PARTITION}
    fetched = await engine.fetch("q", "a", count=10)
    assert [d.message.body for d in fetched.messages] == [b"in3", b"in4"]
    stats = await engine.group_stats("q", "a")
    assert stats.backlog == 0  # its progress did not move


async def test_a_span_too_large_copies_nothing(make_engine, clock, monkeypatch):
    monkeypatch.setattr(pull, "RECONSUME_MAX", 3)
    engine = make_engine(queue_snap())
    start = engine.now_ms()
    await engine.append_many("q", "a", [Message(b"%d" % i) for i in range(4)])
    clock.advance(1)
    with pytest.raises(SpanTooLarge):
        await engine.reconsume_spans("q", "a", from_ms=start, to_ms=engine.now_ms())
    with pytest.raises(InvalidMessage):
        await engine.reconsume_spans("q", "a", from_ms=5, to_ms=5)
    assert await engine.retry_counts("q", "a") == (0, 0)


async def test_chunks_copy_each_record_once(make_engine, clock, monkeypatch):
    monkeypatch.setattr(pull, "RECONSUME_CHUNK", 2)
    engine = make_engine(queue_snap())
    start = engine.now_ms()
    for i in range(7):
        await publish(engine, b"%d" % i)
    clock.advance(1)
    [(first, end)] = (
        await engine.reconsume_spans("q", "a", from_ms=start, to_ms=engine.now_ms())
    ).values()
    assert await engine.reconsume("q", "a", 0, first, end) == 7
    got = [d.message.body for d in await take(engine, count=20)]
    assert sorted(got[:7]) == [b"%d" % i for i in range(7)]


async def test_a_batch_record_across_a_chunk_border_is_copied_once(make_engine, clock, monkeypatch):
    """A JMQ4 batch (one record, n indexes) that starts in one chunk and ends in the next
    is copied with the first, and its items reach a push consumer once each."""
    from brokers.engine import BatchItem, encode_batch_body

    monkeypatch.setattr(pull, "RECONSUME_CHUNK", 2)
    engine = make_engine(queue_snap())
    start = engine.now_ms()
    await publish(engine, b"a")
    items = [BatchItem(b"b%d" % i) for i in range(3)]
    batch = Message(encode_batch_body(items), batch_count=len(items))
    await engine.append_many("q", "a", [batch])
    await publish(engine, b"z")
    clock.advance(1)
    spans = await engine.reconsume_spans("q", "a", from_ms=start, to_ms=engine.now_ms())
    assert spans == {0: (0, 5)}
    assert await engine.reconsume("q", "a", 0, 0, 5) == 5  # a, the batch's 3 items, z
    got = [d.message.body for d in await take(engine, count=20)]
    assert got == [b"a", b"b0", b"b1", b"b2", b"z"]


async def test_each_item_of_a_retried_batch_is_settled_and_failed_on_its_own(make_engine, clock):
    """A JMQ4 batch in a retry store is its items, each a retry of its own: a push
    consumer that acks one item and fails another gets the failed one back, and not the
    acked one (the items shared the batch's one retry id: acking one settled them all,
    and the failed one was lost)."""
    from brokers.engine import BatchItem, encode_batch_body

    engine = make_engine(queue_snap(max_retry_attempts=5))
    items = [BatchItem(b"b%d" % i, business_id=f"k{i}") for i in range(3)]
    await engine.append_many("q", "a", [Message(encode_batch_body(items), batch_count=3)])
    clock.advance(1)
    await engine.settle("q", "a", 0, [d.index for d in await take(engine)])
    assert await engine.reconsume("q", "a", 0, 0, 3) == 3
    got = await take(engine, count=10)
    assert [(d.partition, d.message.body, d.message.business_id) for d in got] == [
        (RETRY_PARTITION, b"b0", "k0"),
        (RETRY_PARTITION, b"b1", "k1"),
        (RETRY_PARTITION, b"b2", "k2"),
    ]
    assert len({d.index for d in got}) == 3  # three retry ids
    assert await engine.settle("q", "a", RETRY_PARTITION, [got[0].index]) == 1
    assert await engine.fail("q", "a", RETRY_PARTITION, [got[1].index]) == 1
    assert await engine.settle("q", "a", RETRY_PARTITION, [got[2].index]) == 1
    clock.advance(60)  # past the backoff
    again = await take(engine, count=10)
    assert [d.message.body for d in again] == [b"b1"]
    assert await engine.retry_counts("q", "a") == (1, 0)


async def test_spans_of_every_partition_in_one_look(make_engine, clock):
    from tests.engine.conftest import snapshot

    engine = make_engine(snapshot(topics={"m": {"partitions": 3}}))
    await engine.append("m", "a", [Message(b"old")], partition=0)
    clock.advance(1)
    start = engine.now_ms()
    await engine.append("m", "a", [Message(b"x"), Message(b"y")], partition=0)
    await engine.append("m", "a", [Message(b"z")], partition=2)
    clock.advance(1)
    spans = await engine.reconsume_spans("m", "a", from_ms=start, to_ms=engine.now_ms())
    assert spans == {0: (1, 3), 2: (0, 1)}  # partition 1 stored nothing then
