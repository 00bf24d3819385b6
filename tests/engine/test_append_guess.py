"""Concurrent appends to one partition guess past each other's indexes, and a wrong guess
never stores a wrong index: the records a reader gets carry the index they are stored at,
after reordering, failures in flight and a partition begun again."""

from __future__ import annotations

import asyncio

from brokers.engine import Message, QoS, QueueSettings, StoreUnavailable
from brokers.engine import append as append_mod
from brokers.engine.append import guess_indexes, pack_records
from brokers.engine.keys import PartitionKeys
from brokers.engine.overflow import append_bounded
from brokers.engine.record import encode_record, record_index
from brokers.engine.sections import log as log_section
from tests.engine.conftest import snapshot


async def _stored_indexes(engine, topic: str, partition: int) -> list[tuple[int, int]]:
    """(the index a reader is given, the index field of the stored record) of every record."""
    lo, hi = await engine.bounds(topic, partition)
    out = []
    while lo < hi:
        got = await engine.read(topic, partition, lo, count=64)
        out.extend((d.index, record_index(d.record)) for d in got)
        lo = got[-1].end
    return out


def _spy_on_appends(monkeypatch) -> list[tuple[int, int]]:
    """(guessed first index, first index got) of every append call from now on."""
    calls: list[tuple[int, int]] = []
    real = log_section.append_blob

    async def spied(*args, **kwargs):
        first = await real(*args, **kwargs)
        calls.append((kwargs["expected_first"], first))
        return first

    monkeypatch.setattr(log_section, "append_blob", spied)
    return calls


async def test_concurrent_appends_guess_past_each_other(make_engine, monkeypatch):
    engine = make_engine(snapshot(topics={"t": {"partitions": 1}}))

    async def forty_calls(n: int) -> list:
        return await asyncio.gather(
            *(engine.append("t", "a", [Message(b"%d" % n)] * 3, partition=0) for _ in range(40))
        )

    # the first time, the client connects one connection per call, and a call is sent
    # when its connection is up (a cluster client's are up in another order)
    first_round = await forty_calls(0)
    calls = _spy_on_appends(monkeypatch)
    results = await forty_calls(1)
    taken = sorted(i for r in first_round + results for i in r.indexes)
    assert taken == list(range(240))
    stored = await _stored_indexes(engine, "t", 0)
    assert stored == [(i, i) for i in range(240)]
    assert engine._next_guess[("t", 0)] == engine._next_seen[("t", 0)] == 240
    # Redis may run calls sent on different connections out of order, but most guesses
    # are right; before guessing past the calls in flight, only the first of 40 was.
    right = sum(1 for guessed, got in calls if guessed == got)
    assert right >= len(calls) // 2, calls


async def test_a_call_that_fails_in_flight_gives_its_indexes_back(make_engine, monkeypatch):
    engine = make_engine(snapshot(topics={"t": {"partitions": 1}}))
    await engine.append("t", "a", [Message(b"first")], partition=0)
    real = log_section.append_blob
    failing = {"left": 1}

    async def flaky(*args, **kwargs):
        if failing["left"]:
            failing["left"] -= 1
            await asyncio.sleep(0.01)  # the calls guessed past it are on their way
            raise StoreUnavailable("the connection failed")
        return await real(*args, **kwargs)

    monkeypatch.setattr(log_section, "append_blob", flaky)
    results = await asyncio.gather(
        *(engine.append("t", "a", [Message(b"m%d" % n)], partition=0) for n in range(6)),
        return_exceptions=True,
    )
    assert sum(isinstance(r, StoreUnavailable) for r in results) == 1
    assert sorted(i for r in results if not isinstance(r, Exception) for i in r.indexes) == [
        1,
        2,
        3,
        4,
        5,
    ]
    # the failed call's guessed indexes are not skipped: the next call lands and guesses at 6
    calls = _spy_on_appends(monkeypatch)
    await engine.append("t", "a", [Message(b"after")], partition=0)
    await engine.append("t", "a", [Message(b"again")], partition=0)
    assert calls == [(6, 6), (7, 7)]
    assert await _stored_indexes(engine, "t", 0) == [(i, i) for i in range(8)]


async def test_a_partition_begun_again_is_guessed_from_its_new_start(
    make_engine, store, monkeypatch
):
    engine = make_engine(snapshot(topics={"t": {"partitions": 1}}))
    for n in range(5):
        await engine.append("t", "a", [Message(b"old%d" % n)], partition=0)
    keys = PartitionKeys("t", 0)
    for key in (keys.stream, keys.meta, keys.requests):
        await store.delete(key)
    calls = _spy_on_appends(monkeypatch)
    assert (await engine.append("t", "a", [Message(b"new0")], partition=0)).indexes == (0,)
    assert (await engine.append("t", "a", [Message(b"new1")], partition=0)).indexes == (1,)
    assert calls == [(5, 0), (1, 1)]
    assert await _stored_indexes(engine, "t", 0) == [(0, 0), (1, 1)]


class _Durability:
    """What :func:`append_blob` asks the store to run, without a store."""

    def __init__(self) -> None:
        self.args: list[tuple[object, ...]] = []

    async def run(self, script, keys, args, qos):
        self.args.append(args)
        return 12


async def test_a_repeat_asks_back_to_the_index_last_seen_not_the_guess():
    durability = _Durability()
    first = await append_mod._append_attempt(
        durability, ("s", "m", "r"), ("ch", 0, 12, 1, b"", "id"), QoS.RECEIVED, 4, "", None, "t/0",
        True,
    )  # fmt: skip
    assert first == 12
    floor = durability.args[0][6]
    assert floor == "4"  # the call guessed 12, but could have landed at 4 (others in flight)


def _spy_on_bounded(monkeypatch) -> list[list[int | str]]:
    """The verdicts of every bounded append call from now on."""
    calls: list[list[int | str]] = []
    real = log_section.append_bounded

    async def spied(*args, **kwargs):
        verdicts = await real(*args, **kwargs)
        calls.append(verdicts)
        return verdicts

    monkeypatch.setattr(log_section, "append_bounded", spied)
    return calls


def _bounded(max_size: int, policy: str):
    return snapshot(
        topics={
            "q": {
                "partitions": 1,
                "queue": QueueSettings(max_queue_size=max_size, overflow_policy=policy),
            }
        }
    )


async def test_bounded_appends_guess_too_and_a_drop_moves_the_rest(make_engine):
    """A bounded topic's appends carry their guessed indexes; the units after one the
    bound dropped are stored at the index they really get."""
    engine = make_engine(_bounded(10, "DropNewest"))
    await engine.append("q", "a", [Message(b"first")])
    await asyncio.gather(*(engine.append("q", "a", [Message(b"%d" % n)] * 2) for n in range(4)))
    assert engine._next_guess[("q", 0)] == engine._next_seen[("q", 0)] == 9
    # one pipelined call of 3: the second fits (backlog 9 < 10), the third is dropped
    results = await engine.append_many("q", "a", [Message(b"a"), Message(b"b"), Message(b"c")])
    assert [r.indexes for r in results] == [(9,), (), ()]  # 10 stored: "b" and "c" dropped
    assert [r.dropped for r in results] == [False, True, True]
    assert await _stored_indexes(engine, "q", 0) == [(i, i) for i in range(10)]
    # what was reserved for the dropped ones is given back: the next call guesses 10
    assert engine._next_guess.get(("q", 0), 10) == engine._next_seen[("q", 0)] == 10


async def test_a_bounded_unit_guessed_wrong_is_stamped_where_it_lands(make_engine, store):
    """The bounded script trusts a unit's first index field only when it is the index the
    unit lands at (a unit is guessed wrong when a call before it in flight dropped some)."""
    engine = make_engine(_bounded(100, "DropNewest"))
    await engine.append("q", "a", [Message(b"first")])
    right = guess_indexes([encode_record(Message(b"right"), app="a", now_ms=1)], 1)[0]
    wrong = guess_indexes([encode_record(Message(b"wrong"), app="a", now_ms=1)], 7)[0]
    batch = pack_records(
        [encode_record(Message(b"b%d" % n), app="a", now_ms=1) for n in range(3)], 40
    )
    verdicts = await append_bounded(
        store, engine.durability, "q", 0, [], [right, wrong, (batch, 3)], max_size=100,
        policy="DropNewest", qos=QoS.RECEIVED,
    )  # fmt: skip
    assert verdicts == [1, 2, 3]
    assert await _stored_indexes(engine, "q", 0) == [(i, i) for i in range(6)]
