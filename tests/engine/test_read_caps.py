"""Every read on the delivery and dead-letter paths stops at ``PULL_READ_BYTES`` (at least
one record): a range read (the console, exports, retry and dead-letter copies), whole
entries (the archive), a group lease of a due range (a migrated backlog, a failed batch)
and a lease of due retries. Messages up to the engine's 16 MiB body limit are allowed,
so without the cap one read of a backlog of them is hundreds of MiB in Redis's reply and
the broker's memory. Whoever wants more reads again from where the last read ended, so
nothing is skipped or read twice."""

from __future__ import annotations

from brokers.engine import RETRY_PARTITION, Message, QueueSettings, RetryType
from brokers.engine.groups import FOUND, LeaseArgs, expire, lease, seed, settle
from brokers.engine.read import PULL_READ_BYTES
from brokers.engine.retry import RetryPolicy, RetryStore
from tests.engine.conftest import snapshot

SIZE = 6 * 1024 * 1024
"""Two such records fit in one read, a third does not."""
ARGS = LeaseArgs(lease_ms=1000, max_retry=-1, backoff_base_ms=0, backoff_cap_ms=0)


def _one_partition(engine_factory):
    return engine_factory(
        snapshot(topics={"t": {"partitions": 1}}, consumers=[{"topic": "t", "app": "a"}])
    )


async def _fill(engine, n: int, size: int = SIZE) -> None:
    for i in range(n):  # one append each: one stream entry each
        await engine.append("t", "a", [Message(b"%d" % i + b"x" * size)], partition=0)


def _within_cap(records) -> bool:
    return len(records) == 1 or sum(len(r) for r in records) <= PULL_READ_BYTES


async def test_a_range_read_stops_at_the_cap_and_reading_on_gets_every_record(make_engine):
    engine = _one_partition(make_engine)
    await _fill(engine, 5)
    first = await engine.read("t", 0, 0, 5)
    assert [d.index for d in first] == [0, 1]
    assert _within_cap([d.record for d in first])
    seen, pos = [], 0
    while pos < 5:
        got = await engine.read("t", 0, pos, 5 - pos)
        assert got and _within_cap([d.record for d in got])
        seen += [d.index for d in got]
        pos = got[-1].end
    assert seen == [0, 1, 2, 3, 4]
    entries = await engine.read_entries("t", 0, 0, 5)
    assert [e.index for e in entries] == [0, 1]
    assert [e.index for e in await engine.read_entries("t", 0, 2, 3)] == [2, 3]


async def test_one_record_over_the_cap_is_still_read_alone(make_engine):
    engine = _one_partition(make_engine)
    await _fill(engine, 2, size=PULL_READ_BYTES - 1024)  # one fits, two do not
    assert [d.index for d in await engine.read("t", 0, 0, 2)] == [0]
    assert [e.index for e in await engine.read_entries("t", 0, 0, 2)] == [0]
    assert [d.index for d in await engine.read("t", 0, 1, 1)] == [1]


async def test_a_failed_ack_over_the_cap_copies_every_message_into_the_retry_store(
    make_engine, clock
):
    """The copy reads the range one capped read at a time: all three messages (18 MiB)
    are retried, none acked away uncopied."""
    engine = _one_partition(make_engine)
    await _fill(engine, 3)
    fetched = await engine.fetch("t", "a", count=3)
    assert [d.index for d in fetched.messages] == [0, 1]  # the fetch stops at the cap
    await engine.ack("t", "a", 0, [0, 1, 2], retry_type=RetryType.EXCEPTION)
    assert sorted(r.index for r in await engine.retries("t", "a")) == [0, 1, 2]
    clock.advance(60)
    indexes = []
    for _ in range(2):
        again = await engine.fetch("t", "a", count=10)
        assert again.partition == RETRY_PARTITION
        assert _within_cap([d.record for d in again.messages])
        indexes += [d.message.body[:1] for d in again.messages]
        await engine.ack("t", "a", RETRY_PARTITION, [d.index for d in again.messages])
    assert sorted(indexes) == [b"0", b"1", b"2"]
    assert await engine.retries("t", "a") == []


async def test_due_retries_are_leased_within_the_cap_and_a_caller_s_own_limit(make_engine):
    engine = _one_partition(make_engine)
    store = RetryStore(engine.redis, "t", "a")
    await _fill(engine, 3)
    records = [(0, d.index, d.count, d.record) for d in await _all(engine, 3)]
    await store.add(records, now_ms=1_000, due_ms=1_000, reason="test")
    policy = RetryPolicy()
    kw = {"now_ms": 2_000, "lease_ms": 10_000, "max_items": 10, "policy": policy}
    assert len(await store.lease(**kw, max_bytes=1)) == 1  # at least one
    assert len(await store.lease(**kw)) == 2  # the cap: the third stays due
    assert await store.lease(**kw) == []  # all leased now
    assert await store.counts() == (3, 0)


async def _all(engine, n: int):
    out, pos = [], 0
    while pos < n:
        got = await engine.read("t", 0, pos, n - pos)
        out += got
        pos = got[-1].end
    return out


async def test_a_due_range_is_leased_within_the_cap_and_the_rest_stays_due(make_engine):
    """A migrated backlog is one due range (:func:`seed`): a lease takes its unsettled
    records up to the cap, across a settled gap, and the next lease the rest."""
    engine = _one_partition(make_engine)
    await _fill(engine, 5)
    now = engine.now_ms()
    await seed(engine.redis, "t", 0, "a", [(0, 5, 1, False)], now_ms=now)
    await settle(engine.redis, "t", 0, "a", [(1, 2)], now_ms=now)

    async def take(owner: str):
        got = await lease(
            engine.redis, "t", 0, "a", now_ms=now, want=10, owner=owner, address="", args=ARGS
        )
        assert got.status == FOUND and _within_cap([d.record for d in got.deliveries])
        return [d.index for d in got.deliveries]

    assert await take("o1") == [0, 2]  # 1 was settled; 3 would pass the cap
    assert await take("o2") == [3, 4]
    ack, n, _, _ = await settle(engine.redis, "t", 0, "a", [(0, 1), (2, 5)], now_ms=now)
    assert (ack, n) == (5, 4)


async def test_a_dead_range_over_the_cap_is_dead_lettered_whole(make_engine, clock):
    """Out of attempts, a range of three large messages (18 MiB) goes to the dead-letter
    queue message by message, read one capped read at a time."""
    engine = make_engine(
        snapshot(
            topics={"t": {"partitions": 1, "queue": QueueSettings(max_retry_attempts=0)}},
            consumers=[{"topic": "t", "app": "a"}],
        )
    )
    await _fill(engine, 3)
    now = engine.now_ms()
    await seed(engine.redis, "t", 0, "a", [(0, 3, 1, True)], now_ms=now)
    got = await engine.lease("t", "a", count=10, owner="o", lease_ms=1_000)
    assert len(got.deliveries) == 2  # the cap
    clock.advance(2)  # the lease lapses: out of attempts
    await engine.lease("t", "a", count=10, owner="o", lease_ms=1_000)
    clock.advance(2)
    await engine.lease("t", "a", count=10, owner="o", lease_ms=1_000)
    dead = await engine.dead_letters("t", "a")
    assert sorted(d.index for d in dead) == [0, 1, 2]


async def test_records_past_their_ttl_go_back_to_be_dead_lettered_within_the_cap(
    make_engine, clock
):
    """TTL expiry hands the records it moves the cursor over back to be dead-lettered:
    at most the cap of them per call (then "more now"), the rest on the next call."""
    engine = _one_partition(make_engine)
    await _fill(engine, 3)
    clock.advance(10)
    now = engine.now_ms()
    gone, due = await expire(engine.redis, "t", 0, "a", now_ms=now, ttl_ms=1_000)
    assert [d.index for d in gone] == [0, 1] and due == now
    assert _within_cap([d.record for d in gone])
    gone, due = await expire(engine.redis, "t", 0, "a", now_ms=now, ttl_ms=1_000)
    assert [d.index for d in gone] == [2] and due == now + 1_000  # none left: a TTL on


async def test_operator_resends_are_handed_out_within_the_cap_each_once(make_engine):
    """HTTP-MQ resends (``retryMsgId``) ride on a fetch: it hands out at most the cap of
    them; what it popped past that goes back to the head of the list, in order, for the
    next fetch — each resend still once."""
    engine = _one_partition(make_engine)
    await _fill(engine, 4)
    await engine.add_resend("t", "a", [(0, 3), (0, 1), (0, 0), (0, 2)])
    rounds = []
    for _ in range(3):
        pulled = await engine.commit_and_fetch("t", "a", commit=None, owner="me")
        assert _within_cap([d.record for d in pulled.resends])
        rounds.append([d.index for d in pulled.resends])
        if pulled.fetched.lock_token:
            f = pulled.fetched
            await engine.commit(
                "t", "a", 0, offset=f.start, next_offset=f.end, lock_time=f.lock_token
            )
    assert rounds == [[3, 1], [0, 2], []]
    assert [d.index for d in await engine.take_resends("t", "a")] == []
