"""Fetch, locks, JMQ4 acks, HTTP-MQ commits, offsets, policies."""

from __future__ import annotations

import asyncio
import random

import pytest

from brokers.engine import (
    AckRejected,
    AckStatus,
    BatchItem,
    ClientIdNotAllowed,
    ClientIdRequired,
    CommitStatus,
    ConsumerNotFound,
    FetchStatus,
    InvalidMessage,
    Message,
)
from brokers.engine.keys import PartitionKeys, consumer_id
from brokers.engine.read import PULL_READ_BYTES
from tests.engine.conftest import PartitionGroupInfo, snapshot


async def produce(engine, partition: int, n: int, topic: str = "t") -> None:
    await engine.append(
        topic, "a", [Message(f"m{i}".encode()) for i in range(n)], partition=partition
    )


async def test_fetch_locks_reads_from_ack_index_and_ack_releases(make_engine):
    engine = make_engine(snapshot(topics={"t": {"partitions": 1}}))
    await produce(engine, 0, 5)
    r = await engine.fetch("t", "a", count=3, owner="c1", address="10.0.0.1:1")
    assert r.status is FetchStatus.FOUND and r.partition == 0
    assert [d.index for d in r.messages] == [0, 1, 2] and (r.start, r.end) == (0, 3)
    assert r.first_consume and r.lock_token > 0
    # locked: a second consumer gets nothing and is told when the lock expires
    r2 = await engine.fetch("t", "a", count=3, owner="c2")
    assert r2.status is FetchStatus.NO_PARTITION and r2.retry_after_ms == r.lock_expires_ms
    ack = await engine.ack("t", "a", 0, [0, 1, 2], owner="c1")
    assert (ack.status, ack.ack_index) == (AckStatus.OK, 3)
    r3 = await engine.fetch("t", "a", count=10, owner="c2")
    assert [d.index for d in r3.messages] == [3, 4] and not r3.first_consume
    [prog] = await engine.progress("t", "a")
    assert (prog.ack_index, prog.max_index, prog.lag, prog.lock_owner) == (3, 5, 2, "c2")
    assert prog.last_address == "10.0.0.1:1"  # c2 gave none: the last known one stays


async def test_unacked_messages_come_back_after_lock_expiry(make_engine, clock):
    engine = make_engine(snapshot(topics={"t": {"partitions": 1}}))
    await produce(engine, 0, 2)
    r = await engine.fetch("t", "a", owner="c1", ack_timeout_ms=1000)
    assert [d.index for d in r.messages] == [0, 1]
    clock.advance(0.5)
    assert (await engine.fetch("t", "a", owner="c2")).status is FetchStatus.NO_PARTITION
    clock.advance(0.6)
    r2 = await engine.fetch("t", "a", owner="c2")
    assert [d.index for d in r2.messages] == [0, 1] and r2.lock_token > r.lock_token
    # the crashed consumer's late ack with its stale token is rejected
    stale = await engine.ack("t", "a", 0, [0, 1], token=r.lock_token)
    assert stale.status is AckStatus.STALE_LOCK and stale.ack_index == 0
    ok = await engine.ack("t", "a", 0, [0, 1], token=r2.lock_token)
    assert ok.status is AckStatus.OK


async def test_out_of_order_acks_wait_for_the_prefix(make_engine):
    """jmq4.md §6.4: an ack that does not start at the ack index is code 0 and leaves the
    ack index where it is, and a successful ack releases the lock — the next fetch reads
    from the ack index again at once. The run stays recorded (DESIGN "Progress": indexes
    acked out of order), so that fetch stops before it and the prefix's ack moves past
    it."""
    engine = make_engine(snapshot(topics={"t": {"partitions": 1}}))
    await produce(engine, 0, 6)
    r = await engine.fetch("t", "a", count=6, owner="c1")
    pending = await engine.ack("t", "a", 0, [4, 5], owner="c1", token=r.lock_token)
    assert (pending.status, pending.ack_index) == (AckStatus.PENDING, 0)
    [prog] = await engine.progress("t", "a")
    assert (prog.ack_index, prog.pending_acks, prog.lock_owner) == (0, 2, "")
    # the lock is gone: a late out-of-order ack of the old batch is not kept
    late = await engine.ack("t", "a", 0, range(2, 4), owner="c1", token=r.lock_token)
    assert (late.status, late.ack_index) == (AckStatus.IGNORED, 0)
    again = await engine.fetch("t", "a", count=10, owner="c2")
    assert [d.index for d in again.messages] == [0, 1, 2, 3]  # not 4-5: acked
    head = await engine.ack("t", "a", 0, [0, 1], owner="c2", token=again.lock_token)
    assert (head.status, head.ack_index) == (AckStatus.OK, 2)
    [prog] = await engine.progress("t", "a")
    assert prog.lock_owner == ""  # a partial ack releases the lock too
    rest = await engine.fetch("t", "a", count=10, owner="c1")
    assert [d.index for d in rest.messages] == [2, 3]
    done = await engine.ack("t", "a", 0, [2, 3], owner="c1", token=rest.lock_token)
    assert (done.status, done.ack_index) == (AckStatus.OK, 6)
    [prog] = await engine.progress("t", "a")
    assert (prog.pending_acks, prog.lock_owner) == (0, "")
    assert (await engine.ack("t", "a", 0, [1], owner="c1")).status is AckStatus.ALREADY


async def test_a_repeated_ack_does_not_free_a_newer_batch(make_engine):
    """An ack of what is already acked, sent again by the holder of the next batch, keeps
    that batch's lock."""
    engine = make_engine(snapshot(topics={"t": {"partitions": 1}}))
    await produce(engine, 0, 4)
    r = await engine.fetch("t", "a", count=2, owner="c1")
    await engine.ack("t", "a", 0, [0, 1], owner="c1", token=r.lock_token)
    r2 = await engine.fetch("t", "a", count=2, owner="c1")
    dup = await engine.ack("t", "a", 0, [0, 1], owner="c1", token=r2.lock_token)
    assert dup.status is AckStatus.ALREADY
    [prog] = await engine.progress("t", "a")
    assert prog.lock_owner == "c1"


async def test_a_batch_acked_out_of_order_comes_back_without_the_acked_part(make_engine, clock):
    """DESIGN "Progress": what comes back is the unacked part only. A JMQ4 client acking
    3–5 of 0–5 frees the partition (jmq4.md §6.4), and the next fetch gets 0–2 at once: 3–5
    are neither delivered again nor counted as failed. Left to lapse, 0–2 count as failed
    (3, not 6), and acking them moves the ack index past 3–5."""
    engine = make_engine(snapshot(topics={"t": {"partitions": 1}}))
    await produce(engine, 0, 8)
    r = await engine.fetch("t", "a", owner="c1", ack_timeout_ms=1000, count=6)
    assert [d.index for d in r.messages] == [0, 1, 2, 3, 4, 5]
    pending = await engine.ack("t", "a", 0, range(3, 6), owner="c1", token=r.lock_token)
    assert pending.status is AckStatus.PENDING
    again = await engine.fetch("t", "a", owner="c2", ack_timeout_ms=1000, count=10)
    assert [d.index for d in again.messages] == [0, 1, 2] and again.lapsed == 0
    clock.advance(1.1)
    third = await engine.fetch("t", "a", owner="c3", count=10)
    assert [d.index for d in third.messages] == [0, 1, 2]
    assert third.lapsed == 3  # c2 failed 0-2
    done = await engine.ack("t", "a", 0, range(0, 3), owner="c3", token=third.lock_token)
    assert (done.status, done.ack_index) == (AckStatus.OK, 6)
    rest = await engine.fetch("t", "a", owner="c3", count=10)
    assert [d.index for d in rest.messages] == [6, 7]


async def test_a_late_out_of_order_ack_leaves_the_lapse_counted(make_engine, clock):
    """The lock ran out before the client acked 3–5 of 0–5: the ack is kept, and the next
    fetch still counts 0–2 as failed (not 0–5, and not nothing) and reads only them."""
    engine = make_engine(snapshot(topics={"t": {"partitions": 1}}))
    await produce(engine, 0, 6)
    r = await engine.fetch("t", "a", owner="c1", ack_timeout_ms=1000, count=6)
    clock.advance(1.1)
    late = await engine.ack("t", "a", 0, range(3, 6), owner="c1", token=r.lock_token)
    assert late.status is AckStatus.PENDING
    again = await engine.fetch("t", "a", owner="c2", count=10)
    assert [d.index for d in again.messages] == [0, 1, 2] and again.lapsed == 3


async def test_ack_beyond_ack_index_without_lock_is_ignored(make_engine):
    engine = make_engine(snapshot(topics={"t": {"partitions": 1}}))
    await produce(engine, 0, 4)
    res = await engine.ack("t", "a", 0, [2, 3], owner="nobody")
    assert (res.status, res.ack_index) == (AckStatus.IGNORED, 0)


async def test_ack_validation(make_engine):
    engine = make_engine(snapshot(topics={"t": {"partitions": 1}}))
    with pytest.raises(AckRejected):
        await engine.ack("t", "a", 0, [1, 3])
    with pytest.raises(AckRejected):
        await engine.ack("t", "a", 0, [1, 1, 2])
    with pytest.raises(AckRejected):
        await engine.ack("t", "a", 0, [])
    with pytest.raises(ConsumerNotFound):
        await engine.ack("t", "zz", 0, [0])


async def test_partition_choice_by_backlog_and_round_robin(make_engine):
    engine = make_engine(snapshot(topics={"t": {"partitions": 3}}))
    await produce(engine, 0, 1)
    await produce(engine, 1, 5)
    await produce(engine, 2, 3)
    order = []
    for i in range(3):
        r = await engine.fetch("t", "a", count=1, owner=f"c{i}")
        order.append(r.partition)
    assert order == [1, 2, 0]  # largest backlog first, locked ones skipped
    # equal backlogs are served round-robin
    engine2 = make_engine(snapshot(topics={"u": {"partitions": 3}}))
    for p in range(3):
        await produce(engine2, p, 2, topic="u")
    seen = []
    for _ in range(3):
        r = await engine2.fetch("u", "a", count=2, owner="c")
        seen.append(r.partition)
        await engine2.ack("u", "a", r.partition, [0, 1], owner="c")
    assert sorted(seen) == [0, 1, 2]


async def test_a_fetch_of_nothing_records_and_reports_where_it_looked(make_engine, clock):
    """NO_NEW_MSG names the first free partition in turn and where it stood; the access is
    recorded there (HTTP-MQ queueInfo, the console's last access of an idle consumer)."""
    engine = make_engine(snapshot(topics={"t": {"partitions": 2}}))
    looked = []
    for address in ("10.0.0.1:1", "10.0.0.2:2"):
        r = await engine.fetch("t", "a", owner="c1", address=address)
        assert r.status is FetchStatus.NO_NEW_MSG and r.lock_token == 0
        assert (r.ack_index, r.max_index, r.accessed_ms) == (0, 0, engine.now_ms())
        looked.append(r.partition)
    assert sorted(looked) == [0, 1]  # the turn moves on
    rows = await engine.progress("t", "a")
    assert {row.partition: row.last_address for row in rows} == {
        looked[0]: "10.0.0.1:1",
        looked[1]: "10.0.0.2:2",
    }
    # looking again within a second from the same address records (and reports) nothing new
    first_time = engine.now_ms()
    clock.advance(0.5)
    again = await engine.fetch("t", "a", owner="c1", address="10.0.0.1:1")
    assert again.partition == looked[0] and again.accessed_ms == first_time
    clock.advance(0.6)
    later = await engine.fetch("t", "a", owner="c1", address="10.0.0.1:1")
    assert later.partition == looked[1] and later.accessed_ms == engine.now_ms()
    rows = await engine.progress("t", "a")
    assert {row.partition: row.last_address for row in rows}[looked[1]] == "10.0.0.1:1"
    await produce(engine, 0, 1)
    held = await engine.fetch("t", "a", owner="c1", address="10.0.0.1:1")
    assert held.found and held.partition == 0 and held.lock_token > 0


async def test_an_idle_poller_records_its_access_once_a_second_over_all_partitions(
    make_engine, clock
):
    """A consumer polling an empty group fast, its turn moving to another partition each
    time, records its access once a second in all — not once per poll (an AOF write per
    empty poll, thousands of idle consumers) — and each poll reports the partition where
    that record is. Another client's poll records its own."""
    engine = make_engine(snapshot(topics={"t": {"partitions": 4}}))

    async def recorded() -> dict[int, str]:
        return {
            r.partition: r.last_address for r in await engine.progress("t", "a") if r.last_address
        }

    start = engine.now_ms()
    reported = set()
    for _ in range(8):
        r = await engine.fetch("t", "a", owner="c1", address="10.0.0.1:1")
        assert r.status is FetchStatus.NO_NEW_MSG and r.accessed_ms == start
        reported.add(r.partition)
        clock.advance(0.1)
    assert len(reported) == 1 and await recorded() == {r.partition: "10.0.0.1:1"}
    other = await engine.fetch("t", "a", owner="c2", address="10.0.0.2:2")
    assert other.accessed_ms == engine.now_ms()  # not c1's record: its own
    assert (await recorded())[other.partition] == "10.0.0.2:2"
    clock.advance(0.3)  # a second after c1's first record
    later = await engine.fetch("t", "a", owner="c1", address="10.0.0.1:1")
    assert later.accessed_ms == engine.now_ms()
    assert (await recorded())[later.partition] == "10.0.0.1:1"


async def test_max_partition_num(make_engine):
    snap = snapshot(
        topics={"t": {"partitions": 3}},
        consumers=[{"topic": "t", "app": "a", "max_partition_num": 1}],
    )
    engine = make_engine(snap)
    for p in range(3):
        await produce(engine, p, 1)
    assert (await engine.fetch("t", "a", owner="c1")).found
    assert (await engine.fetch("t", "a", owner="c1")).status is FetchStatus.NO_PARTITION
    assert (await engine.fetch("t", "a", owner="c2")).found


async def test_paused_blacklist_delay(make_engine, clock):
    snap = snapshot(
        topics={"t": {"partitions": 1}},
        consumers=[{"topic": "t", "app": "a", "paused": True}],
    )
    engine = make_engine(snap)
    await produce(engine, 0, 1)
    assert (await engine.fetch("t", "a")).status is FetchStatus.PAUSED
    engine.set_snapshot(
        snapshot(
            topics={"t": {"partitions": 1}},
            consumers=[{"topic": "t", "app": "a", "blacklist": ("10.1.0.0/16",)}],
        )
    )
    assert (await engine.fetch("t", "a", address="10.1.2.3:5")).status is FetchStatus.BLACKLISTED
    assert (await engine.fetch("t", "a", address="10.2.2.3:5")).found
    engine.set_snapshot(
        snapshot(
            topics={"t": {"partitions": 1}},
            consumers=[{"topic": "t", "app": "b", "delay_ms": 5000}],
        )
    )
    r = await engine.fetch("t", "b")
    assert r.status is FetchStatus.NO_NEW_MSG
    assert r.retry_after_ms == int(clock.now * 1000) + 5000
    clock.advance(5)
    assert (await engine.fetch("t", "b")).found


async def test_broadcast_clients_each_read_everything(make_engine):
    snap = snapshot(
        topics={"t": {"partitions": 2}},
        consumers=[{"topic": "t", "app": "a", "broadcast": True, "start_position": "earliest"}],
    )
    engine = make_engine(snap)
    await produce(engine, 0, 2)
    await produce(engine, 1, 1)
    with pytest.raises(ClientIdRequired):
        await engine.fetch("t", "a")
    for client in ("x", "y"):
        got = []
        for _ in range(2):
            r = await engine.fetch("t", "a", client_id=client, owner=client)
            got += [(r.partition, d.index) for d in r.messages]
            await engine.ack(
                "t", "a", r.partition, range(r.start, r.end), client_id=client, owner=client
            )
        assert sorted(got) == [(0, 0), (0, 1), (1, 0)]
    assert sorted(await engine.broadcast_clients("t", "a")) == ["x", "y"]
    # with start_position latest, a new client starts at the end at its first access
    engine.set_snapshot(
        snapshot(
            topics={"t": {"partitions": 2}},
            consumers=[{"topic": "t", "app": "a", "broadcast": True, "start_position": "latest"}],
        )
    )
    assert (await engine.fetch("t", "a", client_id="z")).status is FetchStatus.NO_NEW_MSG
    await produce(engine, 1, 1)
    late = await engine.fetch("t", "a", client_id="z")
    assert [(late.partition, d.index) for d in late.messages] == [(1, 1)]
    engine.set_snapshot(snapshot(topics={"t": {"partitions": 2}}))
    with pytest.raises(ClientIdNotAllowed):
        await engine.fetch("t", "a", client_id="x")


async def test_broker_fetches_only_its_partitions(make_engine):
    groups = (
        PartitionGroupInfo(group_id=0, leader=1, partitions=(0,)),
        PartitionGroupInfo(group_id=1, leader=2, partitions=(1,)),
    )
    snap = snapshot(topics={"t": {"partitions": 2, "groups": groups}}, brokers={1: {}, 2: {}})
    engine = make_engine(snap, broker_id=2)
    await produce(engine, 0, 3)
    assert (await engine.fetch("t", "a")).status is FetchStatus.NO_NEW_MSG
    await produce(engine, 1, 1)
    assert (await engine.fetch("t", "a")).partition == 1


async def test_batch_fetch_returns_whole_batch(make_engine):
    engine = make_engine(snapshot(topics={"t": {"partitions": 1}}))
    batch = Message.batch([BatchItem(b"%d" % i) for i in range(5)])
    await engine.append("t", "a", [batch, Message(b"tail")], partition=0)
    r = await engine.fetch("t", "a", count=2)
    assert [(d.index, d.count) for d in r.messages] == [(0, 5)] and r.end == 5
    assert (await engine.ack("t", "a", 0, range(0, 5))).ack_index == 5


async def test_offsets_reset_and_register(make_engine, clock):
    engine = make_engine(snapshot(topics={"t": {"partitions": 2}}))
    await produce(engine, 0, 3)
    t_mid = int(clock.now * 1000) + 1000
    clock.advance(2)
    await produce(engine, 0, 2)
    assert await engine.register_consumer("t", "a", start="latest") == {0: 5, 1: 0}
    assert await engine.register_consumer("t", "a", start="earliest") == {0: 5, 1: 0}
    assert (await engine.fetch("t", "a")).status is FetchStatus.NO_NEW_MSG
    assert await engine.reset_offsets("t", "a", timestamp_ms=t_mid) == {0: 3, 1: 0}
    assert [d.index for d in (await engine.fetch("t", "a")).messages] == [3, 4]
    assert await engine.reset_offsets("t", "a", position="earliest", partition=0) == {0: 0}
    assert await engine.reset_offsets("t", "a", position=99) == {0: 5, 1: 0}
    with pytest.raises(InvalidMessage):
        await engine.reset_offsets("t", "a")


async def test_http_commit_rules(make_engine, clock):
    engine = make_engine(snapshot(topics={"t": {"partitions": 1}}))
    no_lock = await engine.commit("t", "a", 0, offset=0, next_offset=2, lock_time=1)
    assert no_lock.status is CommitStatus.LOCK_NOT_EXIST
    await produce(engine, 0, 6)
    r = await engine.fetch("t", "a", count=2, ack_timeout_ms=1000)
    stale = await engine.commit(
        "t", "a", 0, offset=r.start, next_offset=r.end, lock_time=r.lock_token - 1
    )
    assert stale.status is CommitStatus.LOCK_STALE and stale.stored_lock == r.lock_token
    ok = await engine.commit("t", "a", 0, offset=r.start, next_offset=r.end, lock_time=r.lock_token)
    assert (ok.status, ok.committed, ok.applied) == (CommitStatus.OK, 2, True)
    # reset while a batch is out: the old requestId no longer commits
    r2 = await engine.fetch("t", "a", count=2, ack_timeout_ms=1000)
    await engine.reset_offsets("t", "a", position=0)
    late = await engine.commit(
        "t", "a", 0, offset=r2.start, next_offset=r2.end, lock_time=r2.lock_token
    )
    assert (late.status, late.committed) == (CommitStatus.NOT_EQUAL, 0)
    # expired lock still commits, flagged
    r3 = await engine.fetch("t", "a", count=2, ack_timeout_ms=1000)
    clock.advance(2)
    exp = await engine.commit(
        "t", "a", 0, offset=r3.start, next_offset=r3.end, lock_time=r3.lock_token
    )
    assert exp.status is CommitStatus.OK and exp.lock_expired
    r4 = await engine.fetch("t", "a", count=2)
    assert (r4.start, r4.end) == (2, 4)
    again = await engine.commit("t", "a", 0, offset=0, next_offset=2, lock_time=r4.lock_token)
    assert again.status is CommitStatus.COMMITTED and again.committed == 2
    r4 = await engine.fetch("t", "a", count=2)
    await engine.commit("t", "a", 0, offset=2, next_offset=4, lock_time=r4.lock_token)
    r5 = await engine.fetch("t", "a", count=2)
    assert await engine.unlock("t", "a", 0, token=r5.lock_token - 1) is False
    assert await engine.unlock("t", "a", 0, token=r5.lock_token) is True
    dup = await engine.commit("t", "a", 0, offset=2, next_offset=4, lock_time=r5.lock_token)
    assert dup.status is CommitStatus.LOCK_NOT_EXIST
    r6 = await engine.fetch("t", "a", count=2)
    same = await engine.commit("t", "a", 0, offset=0, next_offset=4, lock_time=r6.lock_token)
    assert same.status is CommitStatus.COMMITTED
    with pytest.raises(InvalidMessage):
        await engine.commit("t", "a", 0, offset=5, next_offset=4, lock_time=1)
    # past what the scripts hold exactly (a nextOffset of 10^20 was committed as -2^63 and
    # left the queue redelivering one batch for good), or no position at all: refused
    r7 = await engine.fetch("t", "a", count=2)
    for offsets in ({"next_offset": 10**20}, {"next_offset": -1, "force": True}):
        with pytest.raises(InvalidMessage):
            await engine.commit("t", "a", 0, offset=r7.start, lock_time=r7.lock_token, **offsets)
    done = await engine.commit(
        "t", "a", 0, offset=r7.start, next_offset=r7.end, lock_time=r7.lock_token
    )
    assert done.status is CommitStatus.OK and done.committed == r7.end


async def test_an_offset_past_the_end_is_corrected(make_engine, store):
    """A commit past the partition's end commits the end (http-mq.md OFFSET_ILLEGAL: what
    is appended next is read, not skipped up to the bogus offset); an offset stored past
    it before (by an older version) is corrected by the next fetch: a plain one (JMQ4)
    silently, HTTP-MQ's reports it (CORRECTED, confirmed by a forceAck commit)."""
    engine = make_engine(snapshot(topics={"t": {"partitions": 1}}))
    await produce(engine, 0, 2)
    r = await engine.fetch("t", "a", count=2)
    done = await engine.commit("t", "a", 0, offset=0, next_offset=1000, lock_time=r.lock_token)
    assert (done.status, done.committed) == (CommitStatus.OK, 2)
    await produce(engine, 0, 1)
    assert [d.index for d in (await engine.fetch("t", "a")).messages] == [2]
    state = PartitionKeys("t", 0).state(consumer_id("a"))
    for scanning in (False, True):
        await store.hset(state, mapping={"ack": "500"})
        await store.hdel(state, "le")  # no lock held
        await produce(engine, 0, 1)
        if scanning:  # HTTP-MQ's path: the partitions with a backlog are looked for first
            got = (await engine.commit_and_fetch("t", "a", commit=None)).fetched
            assert (got.status, got.corrected_from) == (FetchStatus.CORRECTED, 500)
            confirmed = await engine.commit(
                "t", "a", 0, offset=500, next_offset=got.ack_index,
                lock_time=got.lock_token, force=True,
            )  # fmt: skip
            assert confirmed.status is CommitStatus.OK
        else:
            got = await engine.fetch("t", "a")
            assert got.status is FetchStatus.NO_NEW_MSG  # resumed at the end, not at 500
        await produce(engine, 0, 1)
        assert len((await engine.fetch("t", "a")).messages) == 1


async def test_long_poll_wakes_on_append(make_engine):
    engine = make_engine(snapshot(topics={"t": {"partitions": 2}}))
    loop = asyncio.get_running_loop()
    started = loop.time()
    task = asyncio.create_task(engine.fetch("t", "a", long_poll_ms=5000))
    await asyncio.sleep(0.2)
    assert not task.done()
    await produce(engine, 1, 1)
    result = await asyncio.wait_for(task, 2)
    assert result.found and result.partition == 1
    assert loop.time() - started < 2


async def test_long_poll_expires_empty(make_engine):
    engine = make_engine(snapshot(topics={"t": {"partitions": 1}}))
    loop = asyncio.get_running_loop()
    started = loop.time()
    result = await engine.fetch("t", "a", long_poll_ms=300)
    assert result.status is FetchStatus.NO_NEW_MSG
    assert 0.25 < loop.time() - started < 2


async def test_long_poll_wakes_when_lock_released(make_engine):
    engine = make_engine(snapshot(topics={"t": {"partitions": 1}}))
    await produce(engine, 0, 2)
    r = await engine.fetch("t", "a", count=1, owner="c1")
    task = asyncio.create_task(engine.fetch("t", "a", owner="c2", long_poll_ms=5000))
    await asyncio.sleep(0.2)
    assert not task.done()
    await engine.ack("t", "a", 0, [0], owner="c1")
    result = await asyncio.wait_for(task, 2)
    assert [d.index for d in result.messages] == [1]
    assert r.found


async def test_parked_fetchers_of_a_group_all_get_served(make_engine):
    """Wake-ups go to one fetcher of a group at a time; none of the data waits out a poll."""
    engine = make_engine(
        snapshot(
            topics={"t": {"partitions": 4}},
            consumers=[{"topic": "t", "app": "a"}, {"topic": "t", "app": "b"}],
        )
    )
    loop = asyncio.get_running_loop()
    tasks = [
        asyncio.create_task(engine.fetch("t", "a", owner=f"c{i}", long_poll_ms=10_000))
        for i in range(6)
    ]
    other = asyncio.create_task(engine.fetch("t", "b", owner="x", long_poll_ms=10_000))
    await asyncio.sleep(0.2)
    started = loop.time()
    for p in range(4):  # four partitions' messages in one notification burst
        await produce(engine, p, 1)
    pending, done = set(tasks), set()
    while len(done) < 4 and loop.time() - started < 5:
        finished, pending = await asyncio.wait(
            pending, timeout=5, return_when=asyncio.FIRST_COMPLETED
        )
        done |= finished
    served = sorted(t.result().partition for t in done if t.result().found)
    assert served == [0, 1, 2, 3]  # four fetchers got one partition each, well before 10 s
    assert loop.time() - started < 5
    assert (await asyncio.wait_for(other, 5)).found  # another group is woken on its own
    for t in tasks:
        t.cancel()


async def test_operator_resends_are_handed_out_once(make_engine):
    engine = make_engine(snapshot(topics={"t": {"partitions": 2}}))
    await produce(engine, 1, 3)
    assert await engine.add_resend("t", "a", [(1, 2), (1, 0)]) == 2
    got = await engine.take_resends("t", "a")
    assert [(d.partition, d.index, d.message.body) for d in got] == [(1, 2, b"m2"), (1, 0, b"m0")]
    assert await engine.take_resends("t", "a") == []
    snap = snapshot(
        topics={"t": {"partitions": 2}}, consumers=[{"topic": "t", "app": "a", "broadcast": True}]
    )
    engine.set_snapshot(snap)
    for client in ("x", "y"):
        await engine.fetch("t", "a", client_id=client)
    assert await engine.add_resend("t", "a", [(1, 1)]) == 2
    assert [d.index for d in await engine.take_resends("t", "a", client_id="x")] == [1]
    assert [d.index for d in await engine.take_resends("t", "a", client_id="y")] == [1]
    assert await engine.take_resends("t", "a", client_id="x") == []


async def test_a_pull_reads_at_most_its_byte_budget_of_large_messages(make_engine):
    """PULL_READ_BYTES: ten messages of 3.5 MiB (any protocol may store up to the body
    limit) are not read as one 35 MiB reply. A fetch or a lease stops before the record
    that would pass the budget; the lock or lease covers what was read, and the next one
    goes on from there."""
    engine = make_engine(snapshot(topics={"t": {"partitions": 1}, "q": {"partitions": 1}}))
    big = random.Random(3).randbytes(3_500_000)
    for topic in ("t", "q"):
        for i in range(6):
            await engine.append(topic, "a", [Message(big + bytes([i]))], partition=0)
    got = await engine.fetch("t", "a", count=10, owner="c1")
    assert [d.index for d in got.messages] == [0, 1, 2, 3] and (got.start, got.end) == (0, 4)
    assert sum(len(d.record) for d in got.messages) <= PULL_READ_BYTES
    await engine.ack("t", "a", 0, range(0, 4), owner="c1", token=got.lock_token)
    rest = await engine.fetch("t", "a", count=10, owner="c1")
    assert [d.index for d in rest.messages] == [4, 5]
    leased = await engine.lease("q", "a", count=10, owner="o")
    assert [d.index for d in leased.deliveries] == [0, 1, 2, 3]
    more = await engine.lease("q", "a", count=10, owner="o")
    assert [d.index for d in more.deliveries] == [4, 5]


async def test_a_fetch_reads_at_most_the_bytes_its_caller_has_room_for(make_engine):
    """``max_bytes`` (what a JMQ4 response frame has left): the batch stops before the
    record that would pass it, at least one goes, and only what was read is locked and
    counted as consumed — on one partition and when the fetch chooses among several."""
    engine = make_engine(snapshot(topics={"t": {"partitions": 1}, "m": {"partitions": 3}}))
    start = engine.now_ms()
    for i in range(5):
        await engine.append("t", "a", [Message(bytes([i]) * 1000)], partition=0)
    size = len((await engine.read("t", 0, 0, 1))[0].record)
    got = await engine.fetch("t", "a", count=10, owner="c1", max_bytes=2 * size + size // 2)
    assert [d.index for d in got.messages] == [0, 1] and (got.start, got.end) == (0, 2)
    await engine.ack("t", "a", 0, [0, 1], owner="c1", token=got.lock_token)
    one = await engine.fetch("t", "a", count=10, owner="c1", max_bytes=1)
    assert [d.index for d in one.messages] == [2]  # at least one, whatever its size
    await engine.ack("t", "a", 0, [2], owner="c1", token=one.lock_token)
    rest = await engine.fetch("t", "a", count=10, owner="c1")
    assert [d.index for d in rest.messages] == [3, 4]
    for p in range(3):
        await engine.append("m", "a", [Message(b"m" * 1000) for _ in range(4)], partition=p)
    chosen = await engine.fetch("m", "a", count=10, owner="c2", max_bytes=3 * size)
    assert len(chosen.messages) == 3 and (chosen.start, chosen.end) == (0, 3)
    await engine.counters.flush()
    rows = await engine.counters.traffic("app", "a", start, engine.now_ms() + 1)
    assert sum(r.consumed for r in rows) == 2 + 1 + 2 + 3
