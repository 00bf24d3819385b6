"""Retry store (partition 32767), backoff, dead letters: list, resend, skip, purge."""

from __future__ import annotations

from brokers.engine import (
    RETRY_PARTITION,
    AckStatus,
    BatchItem,
    FetchStatus,
    Message,
    RetryPolicy,
    RetryType,
)
from tests.engine.conftest import snapshot


def one_partition(**consumer):
    return snapshot(
        topics={"t": {"partitions": 1}}, consumers=[{"topic": "t", "app": "a", **consumer}]
    )


async def test_failed_ack_goes_to_retry_with_backoff_then_dlq(make_engine, clock):
    engine = make_engine(
        one_partition(err_times=3), retry_policy=RetryPolicy(base_ms=1000, cap_ms=3000)
    )
    await engine.append("t", "a", [Message(b"bad"), Message(b"good")], partition=0)
    r = await engine.fetch("t", "a", count=1)
    res = await engine.ack("t", "a", 0, [0], retry_type=RetryType.EXCEPTION)
    assert res.status is AckStatus.OK and res.ack_index == 1 and len(res.retry_ids) == 1
    [rid] = res.retry_ids
    [rec] = await engine.retries("t", "a")
    assert (rec.id, rec.partition, rec.index, rec.attempts, rec.reason) == (
        rid,
        0,
        0,
        1,
        "EXCEPTION",
    )
    assert rec.message.body == b"bad"
    # normal partition first; the retry is not due yet
    r = await engine.fetch("t", "a", count=5)
    assert [d.message.body for d in r.messages] == [b"good"]
    await engine.ack("t", "a", 0, [1])
    empty = await engine.fetch("t", "a")
    assert empty.status is FetchStatus.NO_NEW_MSG and empty.retry_after_ms == rec.due_ms
    delays = []
    for attempt in range(3):
        clock.advance(10)
        got = await engine.fetch("t", "a", ack_timeout_ms=500)
        assert got.partition == RETRY_PARTITION, attempt
        [d] = got.messages
        assert (d.index, d.origin, d.message.body) == (rid, (0, 0), b"bad")
        assert (d.message.partition, d.message.index) == (RETRY_PARTITION, rid)
        # leased: not delivered again until the lease expires
        assert (await engine.fetch("t", "a")).status is not FetchStatus.FOUND
        fail = await engine.ack("t", "a", RETRY_PARTITION, [rid], retry_type=RetryType.TIMEOUT)
        if attempt < 2:
            [rec] = await engine.retries("t", "a")
            delays.append(rec.due_ms - engine.now_ms())
    assert delays == [2000, 3000]  # 1000·2^1, then capped at 3000
    assert fail.dead_lettered == 1
    assert await engine.retries("t", "a") == []
    [dead] = await engine.dead_letters("t", "a")
    assert (dead.id, dead.reason, dead.attempts, dead.message.body) == (
        rid,
        "MaxRetriesExceeded",
        4,
        b"bad",
    )
    assert await engine.retry_counts("t", "a") == (0, 1)
    # resend from the DLQ: delivered again and acked for good
    assert await engine.resend_dead_letters("t", "a") == 1
    got = await engine.fetch("t", "a")
    assert got.partition == RETRY_PARTITION and got.messages[0].message.body == b"bad"
    ok = await engine.ack("t", "a", RETRY_PARTITION, [rid])
    assert ok.status is AckStatus.OK
    assert await engine.retry_counts("t", "a") == (0, 0)
    assert r.found


async def test_a_failed_batch_item_is_retried_alone(make_engine, clock):
    """A JMQ4 consumer that fails one item of a batch and acks the others (one COMMIT_ACK,
    acked run by run) gets only the failed item back; the same holds for a retry made
    through :meth:`retry` (jmq4.md §6.4: the broker stores a copy of that message)."""
    engine = make_engine(one_partition(), retry_policy=RetryPolicy(base_ms=1000, cap_ms=3000))
    batch = Message.batch([BatchItem(b"A"), BatchItem(b"B"), BatchItem(b"C"), BatchItem(b"D")])
    await engine.append("t", "a", [batch], partition=0)
    r = await engine.fetch("t", "a", count=4)
    assert [(d.index, d.count) for d in r.messages] == [(0, 4)]
    await engine.ack("t", "a", 0, [0])
    failed = await engine.ack("t", "a", 0, [1], retry_type=RetryType.EXCEPTION)
    assert failed.status is AckStatus.OK and len(failed.retry_ids) == 1
    done = await engine.ack("t", "a", 0, [2, 3])
    assert done.ack_index == 4
    assert [(rec.index, rec.message.body) for rec in await engine.retries("t", "a")] == [(1, b"B")]
    clock.advance(2)
    got = await engine.fetch("t", "a", count=10)
    assert got.partition == RETRY_PARTITION
    assert [(d.origin, d.message.body) for d in got.messages] == [((0, 1), b"B")]
    await engine.ack("t", "a", RETRY_PARTITION, [d.index for d in got.messages])
    # an explicit retry of two items in the middle of the batch: those two
    assert len(await engine.retry("t", "a", 0, [2, 3])) == 2
    assert [rec.message.body for rec in await engine.retries("t", "a")] == [b"C", b"D"]


async def test_unacked_retry_lease_comes_back(make_engine, clock):
    engine = make_engine(one_partition())
    await engine.append("t", "a", [Message(b"x")], partition=0)
    await engine.fetch("t", "a")
    await engine.ack("t", "a", 0, [0], retry_type=RetryType.OTHER)
    clock.advance(2)
    first = await engine.fetch("t", "a", ack_timeout_ms=1000)
    assert first.partition == RETRY_PARTITION
    clock.advance(0.5)
    assert not (await engine.fetch("t", "a")).found
    clock.advance(1)
    again = await engine.fetch("t", "a")
    assert again.messages[0].index == first.messages[0].index


async def test_read_retry_probability_serves_retries_first(make_engine, clock):
    engine = make_engine(one_partition(read_retry_probability=100))
    await engine.append("t", "a", [Message(b"x"), Message(b"y")], partition=0)
    await engine.fetch("t", "a", count=1)
    await engine.ack("t", "a", 0, [0], retry_type=RetryType.EXCEPTION)
    clock.advance(2)
    got = await engine.fetch("t", "a")
    assert got.partition == RETRY_PARTITION


async def test_retry_disabled_or_sequential_redelivers(make_engine):
    engine = make_engine(one_partition(retry=False))
    await engine.append("t", "a", [Message(b"x")], partition=0)
    r = await engine.fetch("t", "a", owner="c")
    res = await engine.ack("t", "a", 0, [0], retry_type=RetryType.EXCEPTION, owner="c")
    assert res.status is AckStatus.REDELIVER and res.ack_index == 0
    again = await engine.fetch("t", "a", owner="c")
    assert again.messages[0].index == 0 and again.lock_token > r.lock_token
    assert await engine.retry_counts("t", "a") == (0, 0)
    forced = make_engine(one_partition(retry=False), force_ack=True)
    res = await forced.ack("t", "a", 0, [0], retry_type=RetryType.EXCEPTION, owner="c")
    assert res.status is AckStatus.OK and res.retry_ids == ()
    seq = make_engine(snapshot(topics={"s": {"partitions": 1, "type": "sequential"}}))
    await seq.append("s", "a", [Message(b"1"), Message(b"2")], partition=0)
    await seq.fetch("s", "a", owner="c")
    res = await seq.ack("s", "a", 0, [0, 1], retry_type=RetryType.TIMEOUT, owner="c")
    assert res.status is AckStatus.REDELIVER
    again = await seq.fetch("s", "a", owner="c")
    assert [d.index for d in again.messages] == [0, 1]


async def test_dlq_skip_purge_and_retry_ops(make_engine, clock):
    engine = make_engine(one_partition(err_times=1))
    await engine.append("t", "a", [Message(b"%d" % i) for i in range(4)], partition=0)
    await engine.fetch("t", "a", count=4)
    res = await engine.ack("t", "a", 0, range(0, 4), retry_type=RetryType.EXCEPTION)
    assert len(res.retry_ids) == 4
    ids = list(res.retry_ids)
    assert await engine.resend_retries("t", "a", ids[:1]) == 1
    got = await engine.fetch("t", "a", count=1)
    assert got.messages[0].index == ids[0]
    assert await engine.skip_retries("t", "a", [ids[1]]) == 1
    for rid in (ids[0],):
        await engine.ack("t", "a", RETRY_PARTITION, [rid], retry_type=RetryType.EXCEPTION)
    assert [d.id for d in await engine.dead_letters("t", "a")] == [ids[0]]
    assert await engine.purge_retries("t", "a") == 2
    assert await engine.retry_counts("t", "a") == (0, 1)
    clock.advance(1)
    explicit = await engine.retry("t", "a", 0, [3], reason="Manual")
    assert [r.reason for r in await engine.retries("t", "a")] == ["Manual"] and explicit
    assert await engine.skip_dead_letters("t", "a", [ids[0]]) == 1
    assert await engine.dead_letters("t", "a") == []
    for rid in explicit:
        await engine.ack("t", "a", RETRY_PARTITION, [rid], retry_type=RetryType.EXCEPTION)
    assert await engine.purge_dead_letters("t", "a", before_ms=engine.now_ms() - 1) == 0
    assert await engine.purge_dead_letters("t", "a") == 1


async def test_retry_records_expire_into_dlq(make_engine, clock):
    engine = make_engine(one_partition(), retry_policy=RetryPolicy(max_age_ms=10_000))
    await engine.append("t", "a", [Message(b"x")], partition=0)
    await engine.fetch("t", "a")
    await engine.ack("t", "a", 0, [0], retry_type=RetryType.EXCEPTION)
    clock.advance(11)
    assert not (await engine.fetch("t", "a")).found
    [dead] = await engine.dead_letters("t", "a")
    assert dead.reason == "Expired"
