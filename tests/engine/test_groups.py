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


async def _lease(engine, clock, want=2, owner="o", args=ARGS, address=""):
    return await lease(
        engine.redis,
        "t",
        0,
        "a",
        now_ms=engine.now_ms(),
        want=want,
        owner=owner,
        address=address,
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
    ack, n, _, _ = await settle(engine.redis, "t", 0, "a", [(2, 4)], now_ms=engine.now_ms())
    assert (ack, n) == (0, 2)  # out of order: the ack index waits for 0 and 1
    ack, n, _, _ = await settle(engine.redis, "t", 0, "a", [(1, 2)], now_ms=engine.now_ms())
    ack, n, _, _ = await settle(engine.redis, "t", 0, "a", [(0, 1)], now_ms=engine.now_ms())
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


async def test_a_free_empty_partition_makes_a_kept_out_fetch_no_new_msg(make_engine, clock):
    """A fetch kept out of the one partition with messages (a shared lease holds them)
    but free to lock another, empty one finds nothing new; it is NO_PARTITION (HTTP-MQ's
    503) only when no partition could be locked (http-mq.md §9)."""
    engine = make_engine(snapshot(topics={"t": {"partitions": 2}}))
    await _fill(engine, 1)  # partition 0
    got = await _lease(engine, clock, want=1)
    assert got.status == FOUND
    fetched = await engine.fetch("t", "a")
    assert fetched.status.value == "NO_NEW_MSG", fetched


async def _progress(engine) -> tuple:
    """The group's ranges as Redis holds them: starts, due times, hashes."""
    r = engine.redis
    return (
        await r.zrange("mq:{t:t:0}:rs:a", 0, -1, withscores=True),
        await r.zrange("mq:{t:t:0}:rd:a", 0, -1, withscores=True),
        await r.hgetall("mq:{t:t:0}:rh:a"),
    )


async def test_a_caught_up_lease_writes_only_its_last_access_once_a_second(make_engine, clock):
    engine = make_engine(snapshot(topics={"t": {"partitions": 1}}))
    await _fill(engine, 2)
    got = await _lease(engine, clock, address="10.0.0.1")
    await settle(engine.redis, "t", 0, "a", [(0, 2)], now_ms=engine.now_ms())
    before = await _state(engine)
    clock.advance(0.5)
    idle = await _lease(engine, clock, address="10.0.0.1")
    assert (idle.status, idle.hint_ms, idle.deliveries) == (EMPTY, 0, [])
    assert await _state(engine) == before  # nothing written: the last access is 0.5 s old
    clock.advance(0.6)
    await _lease(engine, clock, address="10.0.0.1")
    assert (await _state(engine))["t"] == str(engine.now_ms())
    clock.advance(0.1)
    await _lease(engine, clock, address="10.0.0.2")  # another host: written at once
    st = await _state(engine)
    assert (st["t"], st["ip"], st["cur"], st["ack"]) == (str(engine.now_ms()), "10.0.0.2", "2", "2")
    assert got.status == FOUND


async def test_a_caught_up_lease_says_when_an_unsettled_range_is_due(make_engine, clock):
    engine = make_engine(snapshot(topics={"t": {"partitions": 1}}))
    await _fill(engine, 1)
    first = await _lease(engine, clock)
    deadline = engine.now_ms() + ARGS.lease_ms
    idle = await _lease(engine, clock)
    assert (idle.status, idle.hint_ms) == (EMPTY, deadline)
    clock.advance(1.001)  # the lease expired: due again after the backoff (100 ms)
    backing_off = await _lease(engine, clock)
    assert (backing_off.status, backing_off.hint_ms) == (EMPTY, deadline + 1 + 100)
    clock.advance(0.11)
    again = await _lease(engine, clock)
    assert [(d.index, d.redelivered) for d in again.deliveries] == [(0, True)]
    assert first.deliveries[0].attempts == 1


async def test_a_caught_up_consumer_still_sees_a_pull_lock(make_engine, clock):
    engine = make_engine(snapshot(topics={"t": {"partitions": 1}}))
    await _fill(engine, 1)
    got = await _lease(engine, clock)
    await settle(engine.redis, "t", 0, "a", [(0, 1)], now_ms=engine.now_ms())
    await engine.redis.hset("mq:{t:t:0}:c:a", "le", engine.now_ms() + 5000)
    locked = await _lease(engine, clock)
    assert (locked.status, locked.hint_ms) == (LOCKED, engine.now_ms() + 5000)
    assert got.status == FOUND


async def test_an_ack_inside_a_range_leaves_its_due_time_and_the_lock_hint(make_engine, clock):
    engine = make_engine(snapshot(topics={"t": {"partitions": 1}}))
    await _fill(engine, 4)
    await _lease(engine, clock, want=4)
    deadline = engine.now_ms() + ARGS.lease_ms
    rs, rd, _ = await _progress(engine)
    assert (rs, rd) == ([(b"0", 0.0)], [(b"0", float(deadline))])
    clock.advance(0.1)
    await settle(engine.redis, "t", 0, "a", [(1, 2)], now_ms=engine.now_ms())
    rs2, rd2, rh = await _progress(engine)
    assert (rs2, rd2) == (rs, rd)
    assert rh[b"0"].split(b"|")[5] == b"1-2"  # the covered run
    st = await _state(engine)
    assert (st["sh"], st["ack"]) == (str(deadline), "0")
    await settle(engine.redis, "t", 0, "a", [(0, 1)], now_ms=engine.now_ms())
    assert (await _state(engine))["ack"] == "2"
    await settle(engine.redis, "t", 0, "a", [(2, 3)], mode="release", now_ms=engine.now_ms())
    rs3, rd3, _ = await _progress(engine)  # [2, 3) is due now, [3, 4) keeps its lease
    assert rs3 == [(b"2", 2.0), (b"3", 3.0)]
    assert rd3 == [(b"2", float(engine.now_ms())), (b"3", float(deadline))]
    assert (await _state(engine))["sh"] == str(engine.now_ms())
    await settle(engine.redis, "t", 0, "a", [(2, 4)], now_ms=engine.now_ms())
    rs4, rd4, rh4 = await _progress(engine)
    assert (rs4, rd4, rh4) == ([], [], {})
    st = await _state(engine)
    assert "sh" not in st and st["ack"] == "4"


async def test_interleaved_acks_in_one_call_cover_their_range_once(make_engine, clock):
    engine = make_engine(snapshot(topics={"t": {"partitions": 1}}))
    await _fill(engine, 10)
    await _lease(engine, clock, want=4)  # [0, 4)
    await _lease(engine, clock, want=4)  # [4, 8)
    now = engine.now_ms()
    evens = [(i, i + 1) for i in range(0, 8, 2)]
    ack, n, _, _ = await settle(engine.redis, "t", 0, "a", [*evens, (20, 30)], now_ms=now)
    assert (ack, n) == (1, 4)  # what lies outside every range is ignored
    _, _, rh = await _progress(engine)
    assert {k: v.split(b"|")[5] for k, v in rh.items()} == {b"0": b"0-1,2-3", b"4": b"4-5,6-7"}
    again = [(0, 1), (1, 4)]  # 0 and 2 again, and 1 and 3 new
    ack, n, _, _ = await settle(engine.redis, "t", 0, "a", again, now_ms=now)
    assert (ack, n) == (5, 2)  # [0, 4) settled and gone; 4 settled too
    odds = [(i, i + 1) for i in range(5, 8, 2)]
    ack, n, _, _ = await settle(engine.redis, "t", 0, "a", odds, now_ms=now)
    assert (ack, n) == (8, 2)
    assert await _progress(engine) == ([], [], {})


async def test_interleaved_releases_in_one_call_make_one_range_due(make_engine, clock):
    engine = make_engine(snapshot(topics={"t": {"partitions": 1}}))
    await _fill(engine, 8)
    await _lease(engine, clock, want=8)
    deadline = engine.now_ms() + ARGS.lease_ms
    now = engine.now_ms()
    await settle(engine.redis, "t", 0, "a", [(i, i + 1) for i in (0, 2, 4, 6)], now_ms=now)
    ack, n, _, _ = await settle(
        engine.redis, "t", 0, "a", [(1, 2), (3, 4), (5, 6)], mode="release", now_ms=now
    )
    assert (ack, n) == (1, 3)
    rs, rd, rh = await _progress(engine)
    # [1, 6) due now with its settled part covered; [6, 8) keeps its lease (6 settled);
    # [0, 1) was settled, so it is gone
    assert rs == [(b"1", 1.0), (b"6", 6.0)]
    assert rd == [(b"1", float(now)), (b"6", float(deadline))]
    assert rh[b"1"].split(b"|")[:6] == [b"6", b"1", str(now).encode(), b"", b"r", b"2-3,4-5"]
    assert rh[b"6"].split(b"|")[5] == b"6-7"
    again = await _lease(engine, clock, want=8, owner="o2")
    assert [(d.index, d.redelivered) for d in again.deliveries] == [
        (1, True),
        (3, True),
        (5, True),
    ]
