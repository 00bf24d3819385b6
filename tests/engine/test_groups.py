"""Shared delivery of a group (cursor, in-flight ranges, ack index): the scripts of
brokers.engine.groups on a real Redis."""

from __future__ import annotations

from brokers.engine import Message
from brokers.engine.groups import EMPTY, FOUND, LOCKED, LeaseArgs, lease, release_owner, settle
from tests.engine.conftest import snapshot

ARGS = LeaseArgs(lease_ms=1000, max_retry=2, backoff_base_ms=100, backoff_cap_ms=1000)


async def _fill(engine, n: int) -> None:
    for i in range(n):
        await engine.append("t", "a", [Message(b"%d" % i)], partition=0)


async def _lease(engine, clock, want=2, owner="o", args=ARGS):
    return await lease(
        engine.redis,
        "t",
        0,
        "a",
        now_ms=engine.now_ms(),
        want=want,
        owner=owner,
        address="",
        args=args,
    )


async def _state(engine) -> dict:
    raw = await engine.redis.hgetall("mq:{t:t:0}:c:a")
    return {k.decode(): v.decode() for k, v in raw.items()}


async def test_lease_settle_moves_cursor_and_ack(make_engine, clock):
    engine = make_engine(snapshot(topics={"t": {"partitions": 1}}))
    await _fill(engine, 5)
    a = await _lease(engine, clock)
    b = await _lease(engine, clock)
    assert a.status == FOUND and [d.index for d in a.deliveries] == [0, 1]
    assert [d.index for d in b.deliveries] == [2, 3]
    st = await _state(engine)
    assert (st["cur"], st["ack"]) == ("4", "0")
    ack, n, _ = await settle(engine.redis, "t", 0, "a", [(2, 4)], now_ms=engine.now_ms())
    assert (ack, n) == (0, 2)  # out of order: the ack index waits for 0 and 1
    ack, n, _ = await settle(engine.redis, "t", 0, "a", [(1, 2)], now_ms=engine.now_ms())
    ack, n, _ = await settle(engine.redis, "t", 0, "a", [(0, 1)], now_ms=engine.now_ms())
    assert ack == 4
    assert await engine.redis.zcard("mq:{t:t:0}:rs:a") == 0


async def test_expired_lease_comes_back_after_backoff_then_dies(make_engine, clock):
    engine = make_engine(snapshot(topics={"t": {"partitions": 1}}))
    await _fill(engine, 3)
    first = await _lease(engine, clock)
    await settle(engine.redis, "t", 0, "a", [(1, 2)], now_ms=engine.now_ms())
    clock.advance(1.001)  # lease expired: attempt 1 failed, due after 100 ms
    nxt = await _lease(engine, clock)
    assert [d.index for d in nxt.deliveries] == [2]  # the cursor goes on meanwhile
    clock.advance(0.2)
    again = await _lease(engine, clock)
    assert [(d.index, d.attempts, d.redelivered) for d in again.deliveries] == [(0, 2, True)]
    assert first.deliveries[0].attempts == 1


async def test_release_owner_counts_a_delivery_not_a_failed_attempt(make_engine, clock):
    engine = make_engine(snapshot(topics={"t": {"partitions": 1}}))
    await _fill(engine, 2)
    await _lease(engine, clock, owner="conn1")
    assert await release_owner(engine.redis, "t", [0], "a", "conn1", now_ms=engine.now_ms()) == 1
    again = await _lease(engine, clock, owner="conn2")
    assert [(d.index, d.attempts, d.redelivered) for d in again.deliveries] == [
        (0, 2, True),
        (1, 2, True),
    ]
    # the retry limit (max_retry=2) counts failures only: three expiries to go dead
    for delivery, backoff in ((3, 0.15), (4, 0.25)):
        clock.advance(1.001)  # the lease expired: a failed attempt, due after its backoff
        assert (await _lease(engine, clock)).deliveries == []
        clock.advance(backoff)
        got = await _lease(engine, clock)
        assert [(d.index, d.attempts) for d in got.deliveries] == [(0, delivery), (1, delivery)]
    clock.advance(1.001)
    assert (await _lease(engine, clock)).dead == [0]


async def test_a_range_stored_before_deliveries_were_counted(make_engine, clock):
    """Ranges written by the earlier format (``end|attempt|deadline|owner|flag|covered``)
    are read as delivered ``attempt`` times, one fewer when never delivered."""
    engine = make_engine(snapshot(topics={"t": {"partitions": 1}}))
    await _fill(engine, 4)
    await _lease(engine, clock, want=4)
    now = engine.now_ms()
    rh, rs, rd = (f"mq:{{t:t:0}}:{k}:a" for k in ("rh", "rs", "rd"))
    await engine.redis.delete(rh, rs, rd)
    # [0, 2): failed once, then released; [2, 4): read ahead and handed back unseen
    await engine.redis.hset(rh, mapping={"0": f"2|2|{now}||r|", "2": f"4|1|{now}||n|"})
    await engine.redis.zadd(rs, {"0": 0, "2": 2})
    await engine.redis.zadd(rd, {"0": now, "2": now})
    first = await _lease(engine, clock, want=2)
    second = await _lease(engine, clock, want=2)
    assert [(d.index, d.attempts, d.redelivered) for d in first.deliveries + second.deliveries] == [
        (0, 3, True),
        (1, 3, True),
        (2, 1, False),
        (3, 1, False),
    ]


async def test_release_single_messages_splits_the_range(make_engine, clock):
    engine = make_engine(snapshot(topics={"t": {"partitions": 1}}))
    await _fill(engine, 4)
    got = await _lease(engine, clock, want=4)
    assert len(got.deliveries) == 4
    await settle(engine.redis, "t", 0, "a", [(1, 2)], mode="release", now_ms=engine.now_ms())
    await settle(engine.redis, "t", 0, "a", [(0, 1), (2, 4)], now_ms=engine.now_ms())
    st = await _state(engine)
    assert st["ack"] == "1"
    again = await _lease(engine, clock, want=4)
    assert [(d.index, d.redelivered) for d in again.deliveries] == [(1, True)]
    await settle(engine.redis, "t", 0, "a", [(1, 2)], now_ms=engine.now_ms())
    assert (await _state(engine))["ack"] == "4"
    assert (await _lease(engine, clock)).status == EMPTY


async def test_an_exclusive_lock_keeps_shared_leases_out(make_engine, clock):
    engine = make_engine(snapshot(topics={"t": {"partitions": 1}}))
    await _fill(engine, 2)
    fetched = await engine.fetch("t", "a", count=1)
    assert fetched.found
    assert (await _lease(engine, clock)).status == LOCKED


async def test_shared_ranges_keep_an_exclusive_fetch_out(make_engine, clock):
    engine = make_engine(snapshot(topics={"t": {"partitions": 1}}))
    await _fill(engine, 2)
    got = await _lease(engine, clock, want=1)
    assert got.status == FOUND
    assert (await engine.fetch("t", "a")).status.value == "NO_PARTITION"
    await settle(engine.redis, "t", 0, "a", [(0, 1)], now_ms=engine.now_ms())
    fetched = await engine.fetch("t", "a")
    assert [d.index for d in fetched.messages] == [1]  # from the ack index the group reached
