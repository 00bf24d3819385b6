"""Transactions, retention and counters."""

from __future__ import annotations

import pytest

from brokers.engine import (
    BatchItem,
    IndexOutOfRange,
    Message,
    ProducerNotFound,
    TransactionLimit,
    TransactionNotFound,
)
from brokers.engine.transactions import MAX_OPEN
from tests.engine.conftest import snapshot


async def test_commit_appends_atomically_per_partition_and_is_idempotent(make_engine):
    engine = make_engine(snapshot(topics={"t": {"partitions": 2}}))
    tx = await engine.prepare_transaction("t", "a", transaction_id="q1", timeout_ms=60_000)
    assert (
        await engine.append_to_transaction(
            "t", "a", tx, [Message(b"a"), Message(b"b")], partition=0
        )
        == 2
    )
    batch = Message.batch([BatchItem(b"x"), BatchItem(b"y")])
    assert await engine.append_to_transaction("t", "a", tx, [batch], partition=1) == 3
    assert await engine.bounds("t", 0) == (0, 0)  # invisible before commit
    assert await engine.commit_transaction("t", "a", tx) == {0: 0, 1: 0}
    assert await engine.bounds("t", 0) == (0, 2) and await engine.bounds("t", 1) == (0, 2)
    assert await engine.commit_transaction("t", "a", tx) == {}  # repeated commit: no-op
    assert await engine.bounds("t", 0) == (0, 2)
    with pytest.raises(TransactionNotFound):
        await engine.append_to_transaction("t", "a", tx, [Message(b"late")], partition=0)
    with pytest.raises(TransactionNotFound):
        await engine.rollback_transaction("t", "a", tx)
    with pytest.raises(TransactionNotFound):
        await engine.commit_transaction("t", "a", "no-such-tx")


async def test_a_commit_meets_the_gate_of_now(make_engine):
    """The commit is the write: a producer policy deleted after the messages were logged
    refuses it, nothing is stored, and the transaction can still be rolled back."""
    engine = make_engine(snapshot(topics={"t": {"partitions": 1}}))
    tx = await engine.prepare_transaction("t", "a", timeout_ms=60_000)
    await engine.append_to_transaction("t", "a", tx, [Message(b"a")], partition=0)
    engine.set_snapshot(snapshot(topics={"t": {"partitions": 1}}, producers=[]))
    with pytest.raises(ProducerNotFound):
        await engine.commit_transaction("t", "a", tx)
    assert await engine.bounds("t", 0) == (0, 0)
    await engine.rollback_transaction("t", "a", tx)


async def test_interrupted_commit_is_finished_without_duplicates(make_engine, store):
    from brokers.engine.transactions import BEGIN_COMMIT, Transactions

    engine = make_engine(snapshot(topics={"t": {"partitions": 2}}))
    tx = await engine.prepare_transaction("t", "a", timeout_ms=1000)
    await engine.append_to_transaction("t", "a", tx, [Message(b"p0")], partition=0)
    await engine.append_to_transaction("t", "a", tx, [Message(b"p1")], partition=1)
    txs = Transactions(store, engine.durability, "t", "a")
    # simulate a crash after partition 0 was written: begin, append p0 only
    await BEGIN_COMMIT(store, (txs.keys.meta(tx), txs.keys.log(tx)), ())
    from brokers.engine.keys import PartitionKeys, notify_channel
    from brokers.engine.transactions import APPEND_ONCE, KEEP_MS

    log = await store.lrange(txs.keys.log(tx), 0, -1)
    p, c, rec = log[0].split(b"|", 2)
    k = PartitionKeys("t", 0)
    await APPEND_ONCE(
        store, (k.stream, k.meta, k.tx_done(tx)), [notify_channel("t"), 0, KEEP_MS, int(c), rec]
    )
    with pytest.raises(TransactionNotFound):
        await engine.rollback_transaction("t", "a", tx)  # committing: no rollback
    # the sweep finishes the commit; partition 0 is not appended twice
    await engine.sweep_transactions("t", "a")  # not overdue yet: nothing
    assert await engine.bounds("t", 1) == (0, 0)
    engine._clock.advance(2)  # type: ignore[attr-defined]
    await engine.sweep_transactions("t", "a")
    assert await engine.bounds("t", 0) == (0, 1) and await engine.bounds("t", 1) == (0, 1)
    assert p == b"0"


async def test_rollback_feedback_and_sweep(make_engine, clock):
    engine = make_engine(snapshot(topics={"t": {"partitions": 1}}))
    tx = await engine.prepare_transaction("t", "a", timeout_ms=1000)
    await engine.append_to_transaction("t", "a", tx, [Message(b"x")], partition=0)
    await engine.rollback_transaction("t", "a", tx)
    with pytest.raises(TransactionNotFound):
        await engine.commit_transaction("t", "a", tx)
    assert await engine.bounds("t", 0) == (0, 0)
    with_query = await engine.prepare_transaction("t", "a", transaction_id="q", timeout_ms=1000)
    anonymous = await engine.prepare_transaction("t", "a", timeout_ms=1000)
    assert await engine.transaction_feedback("t", "a") is None  # not overdue
    clock.advance(2)
    info = await engine.transaction_feedback("t", "a")
    assert info is not None and (info.tx_id, info.transaction_id) == (with_query, "q")
    assert await engine.transaction_feedback("t", "a") is None  # not again within 60 s
    clock.advance(61)
    assert (await engine.transaction_feedback("t", "a")).tx_id == with_query
    assert await engine.sweep_transactions("t", "a") == 1  # the anonymous one
    assert [t.tx_id for t in await engine.open_transactions("t", "a")] == [with_query]
    clock.advance(86_400)
    assert await engine.sweep_transactions("t", "a") == 1
    assert await engine.open_transactions("t", "a") == []
    assert anonymous
    with pytest.raises(ProducerNotFound):
        await engine.prepare_transaction("t", "stranger")


async def test_transaction_limit(make_engine, store):
    engine = make_engine(snapshot(topics={"t": {"partitions": 1}}))
    from brokers.engine.keys import TxKeys

    await store.zadd(TxKeys("t", "a").open, {f"fake{i}": 1 for i in range(MAX_OPEN)})
    with pytest.raises(TransactionLimit):
        await engine.prepare_transaction("t", "a")


async def test_retention_by_count_and_age_moves_min(make_engine, clock):
    snap = snapshot(topics={"t": {"partitions": 1, "retention_max_count": 5}})
    engine = make_engine(snap)
    await engine.append("t", "a", [Message(b"%d" % i) for i in range(2)], partition=0)
    for i in range(2, 8):
        await engine.append("t", "a", [Message(b"%d" % i)], partition=0)
    # the records of one append call are stored as one entry: [0, 2) goes or stays whole
    engine.set_snapshot(snapshot(topics={"t": {"partitions": 1, "retention_max_count": 7}}))
    assert await engine.trim("t") == {0: 0}
    engine.set_snapshot(snap)
    assert await engine.trim("t") == {0: 3}
    assert await engine.bounds("t", 0) == (3, 8)
    with pytest.raises(IndexOutOfRange):
        await engine.read("t", 0, 2, 1)
    assert [d.index for d in await engine.read("t", 0, 3, 10)] == [3, 4, 5, 6, 7]
    # a consumer behind min continues from min
    r = await engine.fetch("t", "a", count=1)
    assert r.messages[0].index == 3
    # a batch straddling the cut is kept whole
    await engine.append("t", "a", [Message.batch([BatchItem(b"b")] * 4)], partition=0)  # 8..11
    engine.set_snapshot(snapshot(topics={"t": {"partitions": 1, "retention_max_count": 3}}))
    assert await engine.trim("t") == {0: 8}  # cut 9 lies inside the batch
    engine.set_snapshot(snapshot(topics={"t": {"partitions": 1, "retention_max_age_s": 60}}))
    clock.advance(30)
    await engine.append("t", "a", [Message(b"new")], partition=0)  # index 12
    assert await engine.trim("t") == {0: 8}
    clock.advance(40)
    assert await engine.trim_all() == {"t": {0: 12}}
    clock.advance(100)
    assert await engine.trim("t") == {0: 13}
    assert await engine.bounds("t", 0) == (13, 13)


async def test_counters_per_minute(make_engine, clock):
    engine = make_engine(snapshot(topics={"t": {"partitions": 1}}), broker_id=7)
    start = engine.now_ms()
    await engine.append("t", "a", [Message(b"12345"), Message(b"6")], partition=0)
    clock.advance(60)
    await engine.append("t", "a", [Message(b"x")], partition=0)
    r = await engine.fetch("t", "a", count=10)
    rows = await engine.traffic("topic", "t", start, engine.now_ms() + 60_000)
    assert [(x.produced, x.consumed) for x in rows] == [(2, 0), (1, 3)]
    assert rows[1].consumed_bytes == sum(len(d.record) for d in r.messages)
    assert rows[0].minute_ms == start // 60_000 * 60_000
    assert [
        x.produced for x in await engine.traffic("broker", "7", start, engine.now_ms() + 1)
    ] == [2, 1]
    assert [x.produced for x in await engine.traffic("app", "a", start, start + 1)] == [2]
