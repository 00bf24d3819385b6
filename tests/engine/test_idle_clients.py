"""Broadcast clients that went away for good are forgotten: off the registry, their
progress, own retries and resend list deleted — a fleet whose pods get new clientIds on
every deploy otherwise kept every one of them, in Redis and in every reset, for ever."""

from __future__ import annotations

from brokers.engine import Message, RetryType
from brokers.engine.keys import GroupKeys
from brokers.engine.offsets import unregister_idle
from tests.engine.conftest import snapshot

DAY_S = 24 * 3600
WEEK_MS = 7 * DAY_S * 1000


def catalog():
    return snapshot(
        topics={"t": {"partitions": 2}, "u": {"partitions": 1}},
        consumers=[
            {"topic": "t", "app": "a", "broadcast": True, "start_position": "earliest"},
            {"topic": "u", "app": "a"},  # clustering: nothing to forget
        ],
    )


async def consume_all(engine, client_id: str, *, fail_first: bool = False) -> list[int]:
    """Fetch and ack everything ``client_id`` is given (its first message to its own
    retries when ``fail_first``); the indexes it got."""
    got = []
    for _ in range(2):
        r = await engine.fetch("t", "a", client_id=client_id, owner=client_id)
        if not r.messages:
            continue
        indexes = [d.index for d in r.messages]
        got += indexes
        if fail_first and r.partition == 0:
            await engine.ack(
                "t", "a", r.partition, indexes[:1], client_id=client_id, owner=client_id,
                retry_type=RetryType.EXCEPTION,
            )  # fmt: skip
            indexes = indexes[1:]
        if indexes:
            await engine.ack("t", "a", r.partition, indexes, client_id=client_id, owner=client_id)
    return got


async def keys_of(store, client_id: str) -> list[bytes]:
    return [
        k
        async for k in store.scan_iter(match="*")
        if f"#{client_id}".encode() in k
        or f":m:{len(client_id)}:{client_id}:".encode() in k
        or k.endswith(f":resend:{client_id}".encode())
    ]


async def test_a_client_idle_past_the_retention_is_forgotten(make_engine, clock, store):
    engine = make_engine(catalog())
    await engine.append("t", "a", [Message(b"x")] * 2, partition=0)
    await engine.append("t", "a", [Message(b"y")], partition=1)
    await consume_all(engine, "gone", fail_first=True)
    await engine.add_resend("t", "a", [(0, 0)], client_id="gone")
    await consume_all(engine, "stays")
    assert await engine.retry_counts("t", "a", client_id="gone") == (1, 0)
    assert await keys_of(store, "gone")

    clock.advance(8 * DAY_S)
    assert await consume_all(engine, "stays") == []  # seen again: stays
    assert await engine.forget_idle_clients(idle_ms=WEEK_MS) == {("t", "a"): ["gone"]}
    assert await engine.broadcast_clients("t", "a", active_within_ms=None) == ["stays"]
    assert await keys_of(store, "gone") == []
    assert await engine.retry_counts("t", "a", client_id="gone") == (0, 0)
    assert await engine.forget_idle_clients(idle_ms=WEEK_MS) == {}
    # it comes back: a new client, from its consumer's start position
    assert sorted(await consume_all(engine, "gone")) == [0, 0, 1]


async def test_only_clients_idle_for_the_whole_retention_go(make_engine, clock):
    engine = make_engine(catalog())
    await engine.append("t", "a", [Message(b"x")], partition=0)
    await consume_all(engine, "old")
    clock.advance(6 * DAY_S)
    await consume_all(engine, "recent")
    assert await engine.forget_idle_clients(idle_ms=WEEK_MS) == {}
    clock.advance(2 * DAY_S)
    assert await engine.forget_idle_clients(idle_ms=WEEK_MS) == {("t", "a"): ["old"]}


async def test_a_client_seen_while_it_is_forgotten_stays(make_engine, clock, store):
    """The registry is checked again when a client leaves it: one that fetched since it
    was found idle has a new last-seen time, and stays."""
    engine = make_engine(catalog())
    await engine.append("t", "a", [Message(b"x")], partition=0)
    await consume_all(engine, "c")
    (seen,) = [
        s for c, s in await store.zrange(GroupKeys("t", "a").clients, 0, -1, withscores=True)
    ]
    clock.advance(8 * DAY_S)
    await consume_all(engine, "c")  # between the look and the leave
    assert await unregister_idle(store, "t", "a", [("c", seen)]) == []
    assert await engine.broadcast_clients("t", "a", active_within_ms=None) == ["c"]


async def test_at_most_limit_clients_per_consumer_per_call(make_engine, clock):
    engine = make_engine(catalog())
    for n in range(5):
        await engine.fetch("t", "a", client_id=f"c{n}", owner=f"c{n}")
    clock.advance(8 * DAY_S)
    first = await engine.forget_idle_clients(idle_ms=WEEK_MS, limit=3)
    assert len(first[("t", "a")]) == 3
    second = await engine.forget_idle_clients(idle_ms=WEEK_MS, limit=3)
    assert len(second[("t", "a")]) == 2
    assert await engine.broadcast_clients("t", "a", active_within_ms=None) == []
