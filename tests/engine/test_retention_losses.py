"""Retention counts what it takes before a consumer read it: once per message, per
consumer group (a broadcast consumer's or fan-out queue's worst client), never what a
consumer was handed — a batch it holds locked, a delivery cursor ahead of its acks."""

from __future__ import annotations

import asyncio

import redis.asyncio as aioredis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from brokers.engine import Engine, Message
from tests.engine.conftest import FakeClock, snapshot


def _kept(count: int, consumers: list[dict] | None = None, **topic: object):
    return snapshot(
        topics={"t": {"partitions": 1, "retention_max_count": count, **topic}},
        consumers=consumers,
    )


async def _produce(engine: Engine, n: int) -> None:
    for i in range(n):  # one entry each: retention cuts exactly
        await engine.append("t", "a", [Message(b"m%d" % i)], partition=0)


async def _consume(engine: Engine, app: str, count: int, client_id: str | None = None) -> None:
    got = await engine.fetch("t", app, count=count, client_id=client_id, start_position="earliest")
    assert got.found
    await engine.commit(
        "t",
        app,
        got.partition,
        offset=got.start,
        next_offset=got.end,
        lock_time=got.lock_token,
        client_id=client_id,
    )


async def test_a_trim_counts_what_a_consumer_never_read_once(make_engine):
    engine = make_engine(_kept(5))
    await _produce(engine, 10)
    await _consume(engine, "a", 3)
    assert await engine.trim("t") == {0: 5}
    assert await engine.retention_losses() == {("t", "a"): 2}  # 3 and 4
    assert await engine.trim("t") == {0: 5}
    assert await engine.retention_losses() == {("t", "a"): 2}  # not counted again
    await _produce(engine, 5)
    assert await engine.trim_all() == {"t": {0: 10}}
    assert await engine.retention_losses() == {("t", "a"): 7}  # 5..9: 3 and 4 went before
    # the consumer goes on from the first message kept
    got = await engine.fetch("t", "a", count=1)
    assert got.messages[0].index == 10


async def test_what_was_handed_out_or_never_started_is_not_lost(make_engine):
    consumers = [{"topic": "t", "app": app} for app in ("a", "b", "c")]
    engine = make_engine(_kept(4, consumers))
    await _produce(engine, 10)
    held = await engine.fetch("t", "a", count=8)  # locked, not acked: 0..7 handed
    assert held.found and held.end == 8
    lease = await engine.lease("t", "b", count=7, owner="conn-1")  # cursor at 7
    assert len(lease.deliveries) == 7
    assert await engine.trim("t") == {0: 6}
    # c never consumed: its start is the partition's min, wherever that is
    assert await engine.retention_losses() == {}


async def test_what_a_lease_handed_back_unsettled_is_lost_when_trimmed(make_engine):
    """Below the delivery cursor, what nobody holds any more — handed back unread, due
    again after a consumer went away or failed it — is lost to a trim; the part
    settled before is not, nor is a lease still held."""
    consumers = [{"topic": "t", "app": app} for app in ("a", "b", "c")]
    engine = make_engine(_kept(2, consumers))
    await _produce(engine, 10)
    # a: 0..5 leased; 0 and 2 acked; the connection goes away (0..5 due again)
    lease = await engine.lease("t", "a", count=6, owner="conn-a")
    assert len(lease.deliveries) == 6
    await engine.settle("t", "a", 0, [0, 2])
    await engine.release_owner("t", "a", "conn-a")
    # b: 0..3 read ahead and handed back unread, 4 failed (due after its backoff)
    ahead = await engine.lease("t", "b", count=5, owner="conn-b")
    await engine.return_unread("t", "b", ahead.deliveries[:4])
    await engine.fail("t", "b", 0, [4])
    # c: 0..6 leased and held; 0 acked
    held = await engine.lease("t", "c", count=7, owner="conn-c")
    assert len(held.deliveries) == 7
    await engine.settle("t", "c", 0, [0])
    assert await engine.trim("t") == {0: 8}
    assert await engine.retention_losses() == {
        ("t", "a"): 6,  # 1, 3, 4, 5 handed back, 6 and 7 never handed
        ("t", "b"): 8,  # 0..4 nobody holds, 5..7 never handed
        ("t", "c"): 1,  # 7 never handed; 1..6 are in its hands
    }
    assert await engine.trim("t") == {0: 8}  # nothing counted twice
    assert len(await engine.retention_losses()) == 3
    again = await engine.lease("t", "a", count=10, owner="conn-a2")
    assert sorted(d.index for d in again.deliveries) == [8, 9]


async def test_a_broadcast_consumer_counts_its_worst_active_client(make_engine):
    consumers = [{"topic": "t", "app": "a", "broadcast": True}]
    engine = make_engine(_kept(4, consumers))
    await _produce(engine, 10)
    await _consume(engine, "a", 5, client_id="x")
    await _consume(engine, "a", 2, client_id="y")
    assert await engine.trim("t") == {0: 6}
    assert await engine.retention_losses() == {("t", "a"): 4}  # y lost 2..5, x only 5


async def test_settling_keeps_what_was_recorded_since(make_engine):
    engine = make_engine(_kept(2))
    await _produce(engine, 4)
    await _consume(engine, "a", 1)
    await engine.trim("t")
    seen = await engine.retention_losses()
    assert seen == {("t", "a"): 1}
    await _produce(engine, 2)
    await engine.trim("t")  # 2 more lost meanwhile (2 and 3)
    await engine.settle_retention_losses(seen)
    assert await engine.retention_losses() == {("t", "a"): 2}
    await engine.settle_retention_losses({("t", "a"): 2})
    assert await engine.retention_losses() == {}


_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("produce"), st.integers(1, 5)),
        st.tuples(st.just("consume"), st.integers(1, 6)),
        st.tuples(st.just("hold"), st.integers(1, 6)),
        st.tuples(st.just("commit"), st.just(0)),
        st.tuples(st.just("expire"), st.just(0)),
        st.tuples(st.just("trim"), st.integers(0, 8)),
    ),
    max_size=25,
)


async def _all_accounted(
    engine: Engine, trim, acked: set[int], in_hand: set[int], ops: list
) -> None:
    """Trim everything (``trim`` adds what the consumer holds to ``in_hand``): each
    message retention took was settled, in the consumer's hands, or counted lost — and
    none counted twice."""
    end = await trim(0)
    lost = (await engine.retention_losses()).get(("t", "a"), 0)
    assert lost + len(acked | in_hand) == end, ops


async def _run(redis_url: str, ops: list[tuple[str, int]]) -> None:
    """Run ``ops`` on one consumer with a model of what it has: the indexes it committed,
    and its batch in hand (fetched, not committed, until a later fetch replaces it or,
    its lock run out, finds nothing)."""
    client = aioredis.from_url(redis_url)
    await client.flushdb()
    clock = FakeClock()
    holder = {"snap": _kept(100)}
    engine = Engine(client, lambda: holder["snap"], clock=clock)
    acked: set[int] = set()
    in_hand_trimmed: set[int] = set()  # trimmed while in the consumer's hands
    held = None

    async def trim(keep: int) -> int:
        holder["snap"] = _kept(keep)
        low = (await engine.trim("t"))[0]
        if held is not None:
            in_hand_trimmed.update(i for i in range(held.start, held.end) if i < low)
        return low

    try:
        await engine.register_consumer("t", "a", start="earliest")  # as approval pins it
        for op, n in ops:
            if op == "produce":
                await _produce(engine, n)
            elif op in ("consume", "hold"):
                got = await engine.fetch("t", "a", count=n, ack_timeout_ms=1_000)
                if got.found:
                    held = got
                elif held is not None and engine.now_ms() >= held.lock_expires_ms:
                    held = None  # its lapsed lock was taken over, and nothing is left
                if got.found and op == "consume":
                    op = "commit"
            elif op == "expire":
                clock.advance(2)
            elif op == "trim":
                await trim(n)
            if op == "commit" and held is not None:
                done = await engine.commit(
                    "t",
                    "a",
                    0,
                    offset=held.start,
                    next_offset=held.end,
                    lock_time=held.lock_token,
                )
                if done.status == "ok":
                    acked.update(range(held.start, held.end))
                held = None
        await _all_accounted(engine, trim, acked, in_hand_trimmed, ops)
    finally:
        await engine.close()
        await client.aclose()


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops=_OPS)
def test_every_trimmed_message_was_handed_out_or_counted_lost_once(redis_url, ops):
    asyncio.run(_run(redis_url, ops))


async def _overtaken(engine: Engine) -> None:
    """10 messages, 'a' read 1 of them, retention keeps the last 5."""
    await _produce(engine, 10)
    await _consume(engine, "a", 1)
    assert await engine.trim("t") == {0: 5}


async def _acked_through(engine: Engine, end: int) -> bool:
    (row,) = await engine.progress("t", "a")
    return row.ack_index == end and row.lag == 0 and row.lock_owner == ""


async def test_an_overtaken_pull_consumer_commits_what_it_reads_next(make_engine):
    """HTTP-MQ: the batch after the cut is committed by its requestId's offsets (no
    'committedOffset not equal' for an offset retention moved), and not read again."""
    engine = make_engine(_kept(5))
    await _overtaken(engine)
    got = await engine.fetch("t", "a", count=10)
    assert (got.start, got.end, got.ack_index) == (5, 10, 5)
    done = await engine.commit(
        "t", "a", 0, offset=got.start, next_offset=got.end, lock_time=got.lock_token
    )
    assert done.status == "ok"
    assert await _acked_through(engine, 10)
    assert not (await engine.fetch("t", "a", count=10)).found


async def test_an_overtaken_consumer_acking_by_index_moves_on(make_engine):
    """JMQ4: acking the indexes read after the cut moves the ack index past them and
    releases the partition (they were left as out-of-order acks behind the trimmed gap,
    the lock held until it ran out, and the batch read again)."""
    engine = make_engine(_kept(5))
    await _overtaken(engine)
    got = await engine.fetch("t", "a", count=10, owner="c")
    await engine.ack("t", "a", 0, [d.index for d in got.messages], owner="c", token=got.lock_token)
    assert await _acked_through(engine, 10)
    assert not (await engine.fetch("t", "a", count=10, owner="c")).found


async def test_an_overtaken_push_consumer_settles_what_it_reads_next(make_engine):
    """zbus and VibeMQ: a lease after the cut starts at the first message kept, and
    settling it leaves nothing behind."""
    engine = make_engine(_kept(5))
    await _produce(engine, 10)
    lease = await engine.lease("t", "a", count=1, owner="w")
    await engine.settle("t", "a", 0, [d.index for d in lease.deliveries])
    assert await engine.trim("t") == {0: 5}
    lease = await engine.lease("t", "a", count=10, owner="w")
    assert [d.index for d in lease.deliveries] == [5, 6, 7, 8, 9]
    await engine.settle("t", "a", 0, [d.index for d in lease.deliveries])
    assert await _acked_through(engine, 10)
    stats = await engine.group_stats("t", "a")
    assert (stats.backlog, stats.in_flight) == (0, 0)


_LEASE_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("produce"), st.integers(1, 5)),
        st.tuples(st.just("lease"), st.integers(1, 6)),
        st.tuples(st.just("settle"), st.integers(1, 4)),
        st.tuples(st.just("unread"), st.integers(1, 4)),
        st.tuples(st.just("fail"), st.integers(1, 4)),
        st.tuples(st.just("release"), st.just(0)),
        st.tuples(st.just("trim"), st.integers(0, 8)),
    ),
    max_size=30,
)


async def _run_leases(redis_url: str, ops: list[tuple[str, int]]) -> None:
    """Run ``ops`` on one streaming consumer (zbus, VibeMQ) with a model of what it has
    in hand: the deliveries its connection leased and neither settled, returned, failed
    nor released."""
    client = aioredis.from_url(redis_url)
    await client.flushdb()
    holder = {"snap": _kept(100)}
    engine = Engine(client, lambda: holder["snap"], clock=FakeClock())
    acked: set[int] = set()
    in_hand_trimmed: set[int] = set()
    held: list = []  # deliveries in hand, oldest first

    async def trim(keep: int) -> int:
        holder["snap"] = _kept(keep)
        low = (await engine.trim("t"))[0]
        in_hand_trimmed.update(d.index for d in held if d.index < low)
        return low

    try:
        await engine.register_consumer("t", "a", start="earliest")
        for op, n in ops:
            if op == "produce":
                await _produce(engine, n)
            elif op == "lease":
                held += (await engine.lease("t", "a", count=n, owner="w")).deliveries
            elif op == "settle":
                done, held = held[:n], held[n:]
                await engine.settle("t", "a", 0, [d.index for d in done])
                acked.update(d.index for d in done)
            elif op == "unread":
                done, held = held[:n], held[n:]
                await engine.return_unread("t", "a", done)
            elif op == "fail":
                done, held = held[:n], held[n:]
                await engine.fail("t", "a", 0, [d.index for d in done])
            elif op == "release":
                await engine.release_owner("t", "a", "w")
                held = []
            elif op == "trim":
                await trim(n)
        await _all_accounted(engine, trim, acked, in_hand_trimmed, ops)
    finally:
        await engine.close()
        await client.aclose()


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops=_LEASE_OPS)
def test_every_trimmed_lease_message_was_settled_held_or_counted_lost_once(redis_url, ops):
    asyncio.run(_run_leases(redis_url, ops))
