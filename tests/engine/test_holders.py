"""Lease holders (brokers.engine.holders): the group leases (retry-store leases too) of
an engine that stops renewing — its process died — are due again once it has lapsed,
without waiting for the leases to expire; a live or another holder's leases stay; a closing engine hands on what
it holds itself; a holder taken for dead records its groups again."""

from __future__ import annotations

import asyncio

import pytest

from brokers.engine import RETRY_PARTITION, Message, QueueSettings
from brokers.engine.background import cancel_and_wait
from brokers.engine.keys import RetryKeys, holder_groups_key, holder_members_key, holders_key
from tests.engine.conftest import snapshot

TTL_MS = 300  # renewed every 100 ms, taken for dead 600 ms after its last renewal
LEASE_MS = 600_000  # zbus sessions' lease: 10 minutes


def _catalog():
    return snapshot(topics={"t": {"partitions": 2}}, consumers=[{"topic": "t", "app": "a"}])


async def _fill(engine, n: int) -> None:
    for i in range(n):
        await engine.append("t", "a", [Message(b"m%d" % i)], partition=i % 2)


async def _lease(engine, owner: str, count: int = 10) -> list:
    """Up to ``count`` messages from both partitions, leased for ``owner``."""
    out = []
    for _ in range(2):
        got = await engine.lease("t", "a", count=count, owner=owner, lease_ms=LEASE_MS)
        out += got.deliveries
    return out


async def _renewed(engine) -> None:
    """Wait until the holder's first renewal is in Redis: its task starts with the first
    lease and renews as it gets a turn, so a holder stopped right after leasing may not have
    an entry yet (seen on Redis Cluster, where the renewal waits for a connection to the
    node of ``{holders}``); a process that lived that briefly is not what these tests kill."""
    for _ in range(100):
        if engine.holders._renewed:
            return
        await asyncio.sleep(0.02)
    raise AssertionError("the holder never renewed")


async def _die(engine) -> None:
    """What kill -9 leaves: the holder stops renewing, nothing is released."""
    await _renewed(engine)
    await cancel_and_wait(engine.holders._task)
    engine.holders._task = None
    engine.holders._closed = True  # and its close() does nothing either


async def _lease_until(engine, owner: str, want: int, seconds: float) -> tuple[list, float]:
    loop = asyncio.get_running_loop()
    started = loop.time()
    got: list = []
    while len(got) < want and loop.time() - started < seconds:
        got += await _lease(engine, owner)
        await asyncio.sleep(0.05)
    return got, loop.time() - started


async def test_a_dead_holders_leases_are_due_again_once_it_lapsed(make_engine):
    a = make_engine(_catalog(), holder_ttl_ms=TTL_MS)
    b = make_engine(_catalog(), holder_ttl_ms=TTL_MS)
    await _fill(a, 6)
    held = await _lease(a, "zbus-conn-1")
    assert len(held) == 6
    assert await _lease(b, "zbus-conn-2") == []  # all leased, for 10 minutes
    await _die(a)
    got, took = await _lease_until(b, "zbus-conn-2", 6, 5.0)
    assert sorted(d.record for d in got) == sorted(d.record for d in held)
    # as when a connection closes: delivered again, not a failed attempt
    assert all(d.redelivered for d in got)
    assert all(d.attempts == 2 for d in got)
    assert took < 2.0  # two TTLs and a sweep round, not the 10-minute lease
    assert await b.redis.exists(holder_groups_key(a.holders.id)) == 0  # forgotten
    assert await b.redis.zscore(holders_key(), a.holders.id) is None


async def test_a_live_holders_leases_stay_leased(make_engine):
    a = make_engine(_catalog(), holder_ttl_ms=TTL_MS)
    b = make_engine(_catalog(), holder_ttl_ms=TTL_MS)
    await _fill(a, 4)
    assert len(await _lease(a, "conn-a")) == 4
    got, _ = await _lease_until(b, "conn-b", 1, 1.5)  # five TTLs of sweeping by b
    assert got == []


async def test_only_the_dead_holders_ranges_come_back(make_engine):
    a = make_engine(_catalog(), holder_ttl_ms=TTL_MS)
    c = make_engine(_catalog(), holder_ttl_ms=TTL_MS)
    b = make_engine(_catalog(), holder_ttl_ms=TTL_MS)
    await _fill(a, 4)
    from_a = await _lease(a, "conn", count=1)  # one per partition
    from_c = await _lease(c, "conn", count=1)  # the same owner name, another process
    assert len(from_a) == len(from_c) == 2
    await _die(a)
    got, _ = await _lease_until(b, "conn-b", 2, 5.0)
    await asyncio.sleep(0.3)
    got += await _lease(b, "conn-b")
    assert sorted(d.record for d in got) == sorted(d.record for d in from_a)


async def test_a_closing_engine_hands_on_what_it_still_holds(make_engine):
    a = make_engine(_catalog(), holder_ttl_ms=60_000)
    b = make_engine(_catalog(), holder_ttl_ms=60_000)
    await _fill(a, 3)
    assert len(await _lease(a, "conn-a")) == 3
    await a.close()
    got = await _lease(b, "conn-b")
    assert len(got) == 3 and all(d.redelivered for d in got)


async def test_a_holder_taken_for_dead_records_its_groups_again(make_engine):
    a = make_engine(_catalog(), holder_ttl_ms=TTL_MS)
    b = make_engine(_catalog(), holder_ttl_ms=TTL_MS)
    await _fill(a, 4)
    await _lease(a, "conn-a", count=1)
    await _renewed(a)
    await cancel_and_wait(a.holders._task)  # paused: no renewal for a while
    a.holders._task = None
    got, _ = await _lease_until(b, "conn-b", 4, 5.0)  # 2 free, then the 2 a held
    assert len(got) == 4  # b took a for dead and handed its leases on
    assert await b.redis.exists(holder_groups_key(a.holders.id)) == 0
    await a.holders._renew()  # back: its entry is gone, so it forgets what it recorded
    assert a.holders._registered == {}
    await _lease(a, "conn-a", count=1)
    assert await a.redis.exists(holder_groups_key(a.holders.id)) == 1


async def _fetch_within(engine, seconds: float):
    """A held fetch for another connection, tried until it finds something (or the time
    is up: the last, empty result)."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    while True:
        got = await engine.fetch("t", "a", owner="conn-2", held=True)
        if got.found or loop.time() - started >= seconds:
            return got
        await asyncio.sleep(0.05)


async def test_a_dead_holders_partition_locks_are_dropped_not_those_of_stateless_clients(
    make_engine,
):
    """A JMQ4 connection's lock (``held``) goes with its dead process; an HTTP-MQ client's
    lock (not held: any proxy process serves its next request) waits for its ack timeout."""
    catalog = snapshot(
        topics={"t": {"partitions": 2}},
        consumers=[{"topic": "t", "app": "a", "ack_timeout_ms": 600_000}],
    )
    a = make_engine(catalog, holder_ttl_ms=TTL_MS)
    b = make_engine(catalog, holder_ttl_ms=TTL_MS)
    for i in range(4):
        await a.append("t", "a", [Message(b"m%d" % i)], partition=i % 2)
    jmq4 = await a.fetch("t", "a", owner="conn-1", held=True)
    http = await a.fetch("t", "a", owner="http:10.0.0.1")
    assert {jmq4.partition, http.partition} == {0, 1}
    b.holders.start()  # a broker process renews and sweeps from its start
    await _die(a)
    got = await _fetch_within(b, 5.0)
    assert got.found and got.partition == jmq4.partition
    assert [d.record for d in got.messages] == [d.record for d in jmq4.messages]
    assert not (await b.fetch("t", "a", owner="conn-2", held=True)).found  # http's: locked


async def test_held_locks_ack_and_unlock_as_their_fetch_took_them(make_engine):
    a = make_engine(_catalog(), holder_ttl_ms=60_000)
    await _fill(a, 4)
    first = await a.fetch("t", "a", owner="conn-1", held=True)
    assert first.found
    assert not await a.unlock("t", "a", first.partition, owner="conn-1")  # not the same owner
    assert await a.unlock("t", "a", first.partition, owner="conn-1", held=True)
    again = await a.fetch("t", "a", owner="conn-1", held=True)
    assert again.found
    acked = await a.ack(
        "t",
        "a",
        again.partition,
        [d.index for d in again.messages],
        owner="conn-1",
        token=again.lock_token,
        held=True,
    )
    assert acked.status.name == "OK"


async def test_a_sweep_cut_short_is_finished_by_the_next(make_engine, monkeypatch):
    """Redis failing in the middle of handing a dead holder's leases on: the holder is put
    back, still lapsed, and the next sweep hands everything on."""
    a = make_engine(_catalog(), holder_ttl_ms=TTL_MS)
    b = make_engine(_catalog(), holder_ttl_ms=TTL_MS)
    await _fill(a, 4)
    held = await _lease(a, "conn-a")
    assert len(held) == 4
    await _die(a)
    await asyncio.sleep(2 * TTL_MS / 1000 + 0.1)  # a has lapsed twice over
    real, calls = b.holders._release, []

    async def failing(*args):
        calls.append(args)
        raise ConnectionError("Redis went away")

    monkeypatch.setattr(b.holders, "_release", failing)
    with pytest.raises(ConnectionError):
        await b.holders.sweep()
    assert calls  # it got as far as the first group
    assert await b.redis.zscore(holders_key(), a.holders.id) is not None  # put back
    monkeypatch.setattr(b.holders, "_release", real)
    assert await b.holders.sweep() == 2  # one range per partition
    assert len(await _lease(b, "conn-b")) == 4


async def test_a_held_fetch_the_gate_refuses_records_nothing(make_engine):
    """The group is recorded for the sweep only when a lock may be taken: a paused
    consumer's fetch leaves no record behind."""
    paused = snapshot(
        topics={"t": {"partitions": 2}},
        consumers=[{"topic": "t", "app": "a", "paused": True}],
    )
    a = make_engine(paused, holder_ttl_ms=60_000)
    await _fill(a, 2)
    assert not (await a.fetch("t", "a", owner="conn-1", held=True)).found
    assert await a.redis.exists(holder_groups_key(a.holders.id)) == 0


async def _retried(engine, n: int) -> None:
    """``n`` messages consumed and acked, then copied into the group's retry store (a
    re-consume): due now, for whoever of the group leases next."""
    await _fill(engine, n)
    for d in await _lease(engine, "setup"):
        await engine.settle("t", "a", d.partition, [d.index])
    for partition in (0, 1):
        await engine.reconsume("t", "a", partition, 0, (n + 1 - partition) // 2)


async def test_a_dead_holders_leased_retries_are_due_again_once_it_lapsed(make_engine):
    """Retries a push consumer leased from the group's retry store come back with the
    ranges of the dead process, not after the 10-minute lease; those it settled do not."""
    a = make_engine(_catalog(), holder_ttl_ms=TTL_MS)
    b = make_engine(_catalog(), holder_ttl_ms=TTL_MS)
    await _retried(a, 3)
    held = await _lease(a, "zbus-conn-1")
    assert len(held) == 3 and {d.partition for d in held} == {RETRY_PARTITION}
    assert await a.settle("t", "a", RETRY_PARTITION, [held[0].index]) == 1
    assert await _lease(b, "zbus-conn-2") == []  # leased, for 10 minutes
    await _die(a)
    got, took = await _lease_until(b, "zbus-conn-2", 2, 5.0)
    assert sorted(d.index for d in got) == sorted(d.index for d in held[1:])
    assert all(d.partition == RETRY_PARTITION and d.redelivered for d in got)
    assert took < 2.0
    assert await b.redis.exists(RetryKeys("t", "a").held(a.holders.id)) == 0
    await asyncio.sleep(0.3)
    assert await _lease(b, "zbus-conn-2") == []  # the settled one stayed settled


async def test_a_dead_connections_fetched_retries_come_back_not_a_stateless_clients(
    make_engine,
):
    """A JMQ4 connection's retries (``held``) go back with its dead process; an HTTP-MQ
    client's wait for their ack timeout, as its locks do."""
    catalog = snapshot(
        topics={"t": {"partitions": 2}},
        consumers=[{"topic": "t", "app": "a", "ack_timeout_ms": 600_000}],
    )
    a = make_engine(catalog, holder_ttl_ms=TTL_MS)
    b = make_engine(catalog, holder_ttl_ms=TTL_MS)
    for i in range(2):
        await a.append("t", "a", [Message(b"m%d" % i)], partition=0)
    first = await a.fetch("t", "a", owner="setup")
    await a.ack("t", "a", 0, [d.index for d in first.messages], owner="setup")
    await a.reconsume("t", "a", 0, 0, 2)
    jmq4 = await a.fetch("t", "a", owner="conn-1", held=True, count=1)
    http = await a.fetch("t", "a", owner="http:10.0.0.1", count=1)
    assert jmq4.partition == http.partition == RETRY_PARTITION
    b.holders.start()
    await _die(a)
    got = await _fetch_within(b, 5.0)
    assert got.found and got.partition == RETRY_PARTITION
    assert [d.index for d in got.messages] == [d.index for d in jmq4.messages]
    assert not (await b.fetch("t", "a", owner="conn-2", held=True)).found  # http's: leased


async def test_a_dead_holders_leased_member_retries_come_back_to_that_member(make_engine):
    catalog = snapshot(
        topics={"t": {"partitions": 1}},
        consumers=[{"topic": "t", "app": "a", "broadcast": True}],
    )
    a = make_engine(catalog, holder_ttl_ms=TTL_MS)
    b = make_engine(catalog, holder_ttl_ms=TTL_MS)
    await a.append("t", "a", [Message(b"job")], partition=0)
    [d] = (await a.lease("t", "a", count=1, owner="c", client_id="m1")).deliveries
    await a.settle("t", "a", 0, [d.index], client_id="m1")
    assert await a.reconsume("t", "a", 0, 0, 1, client_id="m1") == 1
    [held] = (
        await a.lease("t", "a", count=1, owner="c", client_id="m1", lease_ms=LEASE_MS)
    ).deliveries
    assert held.partition == RETRY_PARTITION
    b.holders.start()
    await _die(a)
    loop = asyncio.get_running_loop()
    started, got = loop.time(), []
    while not got and loop.time() - started < 5:
        got = (await b.lease("t", "a", count=1, owner="c2", client_id="m1")).deliveries
        await asyncio.sleep(0.05)
    assert [g.index for g in got] == [held.index]


async def test_a_closing_connections_unacked_retries_are_due_again_not_others(make_engine):
    """``unlock_retries``: of the ids a connection names, those its process still holds
    for it come back at once; acked ones and a stateless client's stay as they are."""
    catalog = snapshot(
        topics={"t": {"partitions": 1}},
        consumers=[{"topic": "t", "app": "a", "ack_timeout_ms": 600_000}],
    )
    a = make_engine(catalog)
    await a.append("t", "a", [Message(b"m%d" % i) for i in range(3)], partition=0)
    first = await a.fetch("t", "a", owner="setup", count=3)
    await a.ack("t", "a", 0, [d.index for d in first.messages], owner="setup")
    assert await a.reconsume("t", "a", 0, 0, 3) == 3
    conn = await a.fetch("t", "a", owner="conn-1", held=True, count=2)
    http = await a.fetch("t", "a", owner="http:10.0.0.1", count=1)
    assert conn.partition == http.partition == RETRY_PARTITION
    done, kept = conn.messages
    await a.ack("t", "a", RETRY_PARTITION, [done.index], owner="conn-1", held=True)
    named = [done.index, kept.index, http.messages[0].index]
    assert await a.unlock_retries("t", "a", named) == 1
    again = await a.fetch("t", "a", owner="conn-2", held=True, count=10)
    assert [d.index for d in again.messages] == [kept.index]


def _fan_out_catalog():
    return snapshot(
        topics={"f": {"partitions": 1, "queue": QueueSettings(delivery_mode="FanOutWithAck")}},
        consumers=[{"topic": "f", "app": "a"}],
    )


async def test_a_dead_holders_fan_out_members_leave(make_engine):
    """The members a process joined for its connections leave when it dies, as when
    their connections close: a connection's own member's progress goes at once, a durable
    member's after its keep time; a member not held by it stays. Before, a crashed
    broker's subscribers stayed members for good (their progress was never deleted, and
    the fan-out consumer lagged by theirs)."""
    a = make_engine(_fan_out_catalog(), holder_ttl_ms=TTL_MS)
    b = make_engine(_fan_out_catalog(), holder_ttl_ms=TTL_MS)
    await a.join("f", "a", "~conn", held=True)
    await a.join("f", "a", "durable", held=True, keep_ms=300)
    await b.join("f", "a", "elsewhere")  # not held: another broker's, say
    b.holders.start()  # as a broker process does at once
    await a.join("f", "a", "gone", held=True)
    await a.leave("f", "a", "gone")  # left before: nothing to do for it
    assert sorted(await b.members("f", "a")) == ["durable", "elsewhere", "~conn"]
    await _die(a)
    for _ in range(60):  # b's sweep: two TTLs and a round
        if "~conn" not in await b.members("f", "a"):
            break
        await asyncio.sleep(0.05)
    assert sorted(await b.members("f", "a")) == ["durable", "elsewhere"]  # kept a while
    await asyncio.sleep(0.5)
    assert await b.members("f", "a") == ["elsewhere"]
    assert await b.redis.exists(holder_members_key(a.holders.id)) == 0
