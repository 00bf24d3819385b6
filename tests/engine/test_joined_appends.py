"""Appends made to a partition while another is in flight there go to Redis as one
(:mod:`brokers.engine.joined_appends`): each caller still gets its own indexes, in its
order, with its own client address on its records, its own refusal, or nothing stored
when it went away while waiting."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given
from hypothesis import strategies as st

from brokers.engine import Message, StoreUnavailable
from brokers.engine.joined_appends import split_result
from brokers.engine.model import AppendResult
from brokers.engine.record import BatchItem, decode_record
from brokers.engine.sections import log as log_section
from tests.engine.conftest import snapshot


def _spy_on_appends(monkeypatch) -> list[int]:
    """The number of records of each Redis append from now on (its ``total``)."""
    sent: list[int] = []
    real = log_section.append_blob

    async def spied(redis, durability, topic, partition, blob, total, *args, **kwargs):
        sent.append(total)
        return await real(redis, durability, topic, partition, blob, total, *args, **kwargs)

    monkeypatch.setattr(log_section, "append_blob", spied)
    return sent


async def _records(engine, topic: str = "t", partition: int = 0) -> list:
    lo, hi = await engine.bounds(topic, partition)
    out = []
    while lo < hi:
        got = await engine.read(topic, partition, lo, count=100)
        out.extend(got)
        lo = got[-1].end
    return out


KEY = ("t", "a", 0, log_section.QoS.RECEIVED)


async def test_appends_made_in_one_loop_turn_go_as_one(make_engine, monkeypatch):
    engine = make_engine(snapshot(topics={"t": {"partitions": 1}}))
    sent = _spy_on_appends(monkeypatch)
    results = await asyncio.gather(
        *(
            engine.append_many(
                "t",
                "a",
                [Message(b"c%d-%d" % (c, i)) for i in range(3)],
                client_address=f"10.0.0.{c}:5000",
            )
            for c in range(1, 21)
        )
    )
    assert sent == [60]
    assert engine._joiner.waiting_keys() == 0
    taken = sorted(r.indexes[0] for rs in results for r in rs)
    assert taken == list(range(60))
    records = {d.index: decode_record(d.record) for d in await _records(engine)}
    for c, rs in enumerate(results, start=1):
        indexes = [r.indexes[0] for r in rs]
        assert indexes == sorted(indexes)  # each caller's messages in its order
        for i, index in enumerate(indexes):
            assert records[index].body == b"c%d-%d" % (c, i)
            assert records[index].client_address == f"10.0.0.{c}:5000"


async def test_only_appends_to_one_partition_by_one_app_join(make_engine, monkeypatch):
    engine = make_engine(
        snapshot(
            topics={"t": {"partitions": 2}},
            producers=[{"topic": "t", "app": "a"}, {"topic": "t", "app": "b"}],
        )
    )
    sent = _spy_on_appends(monkeypatch)
    await asyncio.gather(
        engine.append_many("t", "a", [Message(b"a0")], partition=0),
        engine.append_many("t", "a", [Message(b"a0")], partition=0),
        engine.append_many("t", "a", [Message(b"a1")], partition=1),
        engine.append_many("t", "b", [Message(b"b0")], partition=0),
    )
    assert sorted(sent) == [1, 1, 2]


async def test_a_joined_append_is_capped(make_engine, monkeypatch):
    engine = make_engine(snapshot(topics={"t": {"partitions": 1}}))
    engine._joiner.max_messages = 4
    sent = _spy_on_appends(monkeypatch)
    results = await asyncio.gather(
        *(engine.append_many("t", "a", [Message(b"%d" % c)] * 2) for c in range(3))
    )
    assert sent == [4, 2]
    assert sorted(r.indexes[0] for rs in results for r in rs) == list(range(6))


async def test_a_large_append_goes_at_once_alone(make_engine, monkeypatch):
    engine = make_engine(snapshot(topics={"t": {"partitions": 1}}))
    sent = _spy_on_appends(monkeypatch)
    large = [Message(b"L")] * (engine._joiner.max_part + 1)
    await asyncio.gather(
        engine.append_many("t", "a", [Message(b"s")]),
        engine.append_many("t", "a", large),
        engine.append_many("t", "a", [Message(b"s")]),
    )
    assert sent == [len(large), 2]  # the large one did not wait for the turn's end


async def test_a_lone_producer_appends_alone(make_engine, monkeypatch):
    engine = make_engine(snapshot(topics={"t": {"partitions": 1}}))
    sent = _spy_on_appends(monkeypatch)
    for n in range(3):
        await engine.append_many("t", "a", [Message(b"%d" % n)], client_address="10.0.0.1")
    assert sent == [1, 1, 1]
    assert engine._joiner.waiting_keys() == 0


async def test_a_bad_message_fails_only_its_own_caller(make_engine, monkeypatch):
    engine = make_engine(snapshot(topics={"t": {"partitions": 1}}))
    engine.max_body = 100
    sent = _spy_on_appends(monkeypatch)
    first, bad, good = await asyncio.gather(
        engine.append_many("t", "a", [Message(b"first")]),
        engine.append_many("t", "a", [Message(b"ok"), Message(b"x" * 101), Message(b"ok2")]),
        engine.append_many("t", "a", [Message(b"good")]),
    )
    assert [type(r).__name__ for r in bad] == ["AppendResult", "MessageTooLarge", "AppendResult"]
    assert [type(r).__name__ for r in first + good] == ["AppendResult", "AppendResult"]
    bodies = [decode_record(d.record).body for d in await _records(engine)]
    # the joined call was refused whole, so each part went alone, in order; the bad part
    # was refused whole too, and its caller stored its good messages one by one after
    assert bodies == [b"first", b"good", b"ok", b"ok2"]
    assert sent == [1, 1, 1, 1]


@pytest.mark.parametrize("gone", [0, 1], ids=["the first of the turn", "one that joined"])
async def test_a_caller_gone_before_the_end_of_its_turn_is_not_stored(
    make_engine, monkeypatch, gone
):
    engine = make_engine(snapshot(topics={"t": {"partitions": 1}}))
    sent = _spy_on_appends(monkeypatch)
    bodies = [b"first", b"second", b"third"]
    tasks = [asyncio.create_task(engine.append_many("t", "a", [Message(b)])) for b in bodies]
    await asyncio.sleep(0)  # each has made its append: the first yields, two joined it
    assert len(engine._joiner._waiting[KEY]) == 2
    tasks[gone].cancel()
    for i, task in enumerate(tasks):
        if i == gone:
            with pytest.raises(asyncio.CancelledError):
                await task
        else:
            await task
    stored = [decode_record(d.record).body for d in await _records(engine)]
    assert stored == [b for i, b in enumerate(bodies) if i != gone]
    assert sent == [2]
    assert engine._joiner.waiting_keys() == 0


async def test_a_failed_store_fails_every_part_and_frees_the_partition(make_engine, monkeypatch):
    engine = make_engine(snapshot(topics={"t": {"partitions": 1}}))
    real = log_section.append_blob
    calls = {"n": 0}

    async def failing_first(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 1:
            raise StoreUnavailable("the connection failed")
        return await real(*args, **kwargs)

    monkeypatch.setattr(log_section, "append_blob", failing_first)
    results = await asyncio.gather(
        *(engine.append_many("t", "a", [Message(b"j")]) for _ in range(3)),
        return_exceptions=True,
    )
    assert [type(r).__name__ for r in results] == ["StoreUnavailable"] * 3
    assert engine._joiner.waiting_keys() == 0
    await engine.append_many("t", "a", [Message(b"after")])
    assert [decode_record(d.record).body for d in await _records(engine)] == [b"after"]


async def test_batches_keep_their_index_ranges_when_joined(make_engine, monkeypatch):
    engine = make_engine(snapshot(topics={"t": {"partitions": 1}}))
    sent = _spy_on_appends(monkeypatch)
    batch = Message.batch([BatchItem(b"b%d" % i) for i in range(4)])
    first, got_a, got_b = await asyncio.gather(
        engine.append_many("t", "a", [Message(b"first")]),
        engine.append_many("t", "a", [batch, Message(b"after-batch")]),
        engine.append_many("t", "a", [Message(b"last")]),
    )
    assert sent == [7]
    assert [r.indexes for r in first + got_a + got_b] == [(0,), (1,), (5,), (6,)]
    records = {d.index: d for d in await _records(engine)}
    assert sorted(records) == [0, 1, 5, 6]
    assert records[1].count == 4  # the batch kept its four indexes


@given(st.lists(st.lists(st.integers(1, 5), min_size=1, max_size=4), min_size=1, max_size=6))
def test_split_results_partition_the_joined_indexes(parts):
    """Each part's result covers exactly its own messages' indexes, back to back."""
    counts = [c for part in parts for c in part]
    indexes, at = [], 10
    for c in counts:
        indexes.append(at)
        at += c
    joined = AppendResult("t", 0, 10, tuple(indexes), at - 10, 123)
    out = split_result(joined, [len(p) for p in parts])
    assert [r.indexes for r in out] == [
        tuple(indexes[sum(map(len, parts[:i])) : sum(map(len, parts[: i + 1]))])
        for i in range(len(parts))
    ]
    assert sum(r.count for r in out) == joined.count
    for r, part in zip(out, parts, strict=True):
        assert r.count == sum(part)
        assert r.first_index == r.indexes[0]
        assert (r.topic, r.partition, r.store_time_ms) == ("t", 0, 123)
