"""Queue features as consumer-group features: FIFO leases, retry with backoff and the
dead-letter queue, release, TTL at lease time, max size and overflow on the backlog —
whatever protocol produced, and the same numbers for every consumer."""

from __future__ import annotations

import asyncio

import pytest

from brokers.engine import (
    RETRY_PARTITION,
    AppendResult,
    CatalogDelta,
    CatalogSnapshot,
    InvalidMessage,
    Message,
    QueueFull,
    QueueRetry,
    QueueSettings,
    TopicInfo,
    TopicNotFound,
    dead_letter_parent,
)
from tests.engine.conftest import snapshot


def queue_snap(**settings) -> object:
    return snapshot(topics={"q": {"partitions": 1, "queue": QueueSettings(**settings)}})


async def take(engine, topic: str = "q", count: int = 10, **kw) -> list:
    kw.setdefault("owner", "t")
    return (await engine.lease(topic, "a", count=count, **kw)).deliveries


async def publish(engine, body: bytes, topic: str = "q", **kw):
    [result] = await engine.append_many(topic, "a", [Message(body, **kw)])
    if isinstance(result, Exception):
        raise result
    return result


async def test_fifo_across_protocol_produce_paths(make_engine):
    engine = make_engine(queue_snap())
    await publish(engine, b"1")
    await engine.append("q", "a", [Message(b"2"), Message(b"3")])  # an atomic batch
    await publish(engine, b"4")
    assert [d.message.body for d in await take(engine)] == [b"1", b"2", b"3", b"4"]
    assert all(d.attempts == 1 and not d.redelivered for d in await take(engine)) is True


async def test_ack_timeout_retries_with_backoff_then_dlq(make_engine, clock):
    engine = make_engine(queue_snap(max_retry_attempts=2, dead_letter_enabled=True))
    await publish(engine, b"job", attributes={"k": "v"})
    [d] = await take(engine, lease_ms=30_000)
    assert await take(engine) == []  # in flight
    assert (await engine.group_stats("q", "a")).in_flight == 1
    clock.advance(31)
    assert await take(engine) == []  # failed attempt 1: retry in 2 s
    assert (await engine.group_stats("q", "a")).retrying == 1
    clock.advance(2)
    [d2] = await take(engine, lease_ms=1000)
    assert (d2.index, d2.attempts, d2.redelivered) == (d.index, 2, True)
    assert await engine.fail("q", "a", 0, [d2.index]) == 1  # attempt 2 failed: retry in 4 s
    clock.advance(3.9)
    assert await take(engine) == []
    clock.advance(0.2)
    [d3] = await take(engine)
    assert d3.attempts == 3
    await engine.fail("q", "a", 0, [d3.index])  # past max_retry_attempts: dead-lettered
    stats = await engine.group_stats("q", "a")
    assert (stats.backlog, stats.in_flight, stats.retrying) == (0, 0, 0)
    [dead] = await take(engine, "q.dlq")
    msg = dead.message
    assert msg.body == b"job" and msg.attributes["k"] == "v"
    assert msg.attributes["deadLetterReason"] == "MaxRetriesExceeded"
    assert (msg.attributes["originalQueue"], msg.attributes["deliveryAttempts"]) == ("q", "3")


async def test_without_a_dlq_dead_messages_wait_in_the_groups_dead_letters(make_engine, clock):
    engine = make_engine(queue_snap(max_retry_attempts=0))
    await publish(engine, b"job")
    [d] = await take(engine)
    await engine.fail("q", "a", 0, [d.index])
    assert await take(engine) == []
    [dead] = await engine.dead_letters("q", "a")
    assert dead.message.body == b"job" and dead.reason == "MaxRetriesExceeded"


async def test_a_groups_retries_reach_its_push_consumers(make_engine, clock):
    """Dead letters resent (or messages copied into the group's retry store) are leased
    by push consumers too, before new messages: partition RETRY_PARTITION, the index
    their retry id, redelivered. An ack removes them; a failure backs off (past the
    policy's err_times: dead again); a release makes them due at once; a lessee's own
    retry is a failure."""
    engine = make_engine(queue_snap(max_retry_attempts=0))
    await publish(engine, b"job")
    [d] = await take(engine)
    await engine.fail("q", "a", 0, [d.index])  # dead: the group's dead letters
    await publish(engine, b"new")
    assert await engine.resend_dead_letters("q", "a") == 1
    [again] = await take(engine, count=1)
    assert (again.partition, again.origin, again.redelivered) == (RETRY_PARTITION, (0, 0), True)
    assert again.message.body == b"job"
    assert [x.message.body for x in await take(engine)] == [b"new"]  # leased: not twice
    assert await engine.release("q", "a", RETRY_PARTITION, [again.index]) == 1
    [back] = await take(engine)
    assert back.index == again.index
    assert await engine.fail("q", "a", RETRY_PARTITION, [back.index]) == 1
    assert await take(engine) == []  # backing off
    clock.advance(1.1)
    [later] = await take(engine)
    assert await engine.retry_here("q", "a", later, owner="t", lease_ms=1_000) is None
    clock.advance(2.1)
    [last] = await take(engine)
    # a resend starts the count afresh; each failure (the lessee's own retry too) adds one
    assert (again.attempts, later.attempts, last.attempts) == (1, 2, 3)
    assert await engine.settle("q", "a", RETRY_PARTITION, [last.index]) == 1
    assert await engine.retry_counts("q", "a") == (0, 0)
    assert await take(engine) == []


async def test_a_retry_backing_off_says_when_to_look_again(make_engine, clock):
    """A push lease that finds nothing due says when the group's next retry is (its
    consumer parks until then), and asks the store again only then — or when a retry is
    added (a notification)."""
    engine = make_engine(queue_snap())
    await publish(engine, b"job")
    [d] = await take(engine)
    await engine.settle("q", "a", 0, [d.index])
    await engine.retry("q", "a", 0, [d.index])  # a copy, due after the base backoff (1 s)
    lease = await engine.lease("q", "a", count=5, owner="t")
    assert not lease.found and lease.retry_after_ms == engine.now_ms() + 1_000
    clock.advance(1.1)
    [r] = await take(engine)
    await engine.fail("q", "a", RETRY_PARTITION, [r.index])  # attempt 2 failed: 2 s
    for _ in range(2):  # the second one from what the first learned
        lease = await engine.lease("q", "a", count=5, owner="t")
        assert not lease.found and lease.retry_after_ms == engine.now_ms() + 2_000
    clock.advance(2.1)
    assert [x.index for x in await take(engine)] == [r.index]


async def test_ack_settles_and_release_requeues_at_the_head(make_engine):
    engine = make_engine(queue_snap())
    for i in range(3):
        await publish(engine, b"%d" % i)
    a, b = await take(engine, count=2)
    assert await engine.settle("q", "a", 0, [a.index]) == 1
    assert await engine.settle("q", "a", 0, [a.index]) == 0  # already settled: ignored
    assert await engine.release("q", "a", 0, [b.index]) == 1
    again = await take(engine, count=5)
    # delivered again (counted), not a failed attempt (the retry limit does not count it)
    assert [(d.index, d.attempts, d.redelivered) for d in again] == [(b.index, 2, True)]
    assert [(d.index, d.redelivered) for d in await take(engine, count=5)] == [(2, False)]


async def test_a_closed_connection_returns_what_it_held(make_engine):
    engine = make_engine(queue_snap())
    for i in range(4):
        await publish(engine, b"%d" % i)
    await take(engine, count=2, owner="conn-1")
    await take(engine, count=1, owner="conn-2")
    assert await engine.release_owner("q", "a", "conn-1") == 1
    got = await take(engine, count=5, owner="conn-3")
    assert [d.message.body for d in got] == [b"0", b"1"] and all(d.redelivered for d in got)


async def test_ttl_is_checked_when_a_batch_is_leased(make_engine, clock):
    engine = make_engine(queue_snap(message_ttl_ms=1000, dead_letter_enabled=True))
    await publish(engine, b"old")
    clock.advance(0.5)
    await publish(engine, b"fresh")
    clock.advance(0.6)
    assert [d.message.body for d in await take(engine)] == [b"fresh"]
    [dead] = await take(engine, "q.dlq")
    assert dead.message.attributes["deadLetterReason"] == "MessageExpired"
    dropping = make_engine(
        snapshot(topics={"z": {"partitions": 1, "queue": QueueSettings(message_ttl_ms=10)}})
    )
    await publish(dropping, b"x", topic="z")
    clock.advance(1)
    assert await take(dropping, "z") == []
    assert (await dropping.queue_stats("z")).dropped == 1  # counted, not silent


@pytest.mark.parametrize("policy", ["DropOldest", "DropNewest", "BlockPublisher", "RedirectToDlq"])
async def test_overflow_policies_on_the_backlog(make_engine, policy):
    engine = make_engine(
        queue_snap(max_queue_size=2, overflow_policy=policy, dead_letter_enabled=True)
    )
    for body in (b"1", b"2"):
        await publish(engine, body)
    if policy == "BlockPublisher":
        with pytest.raises(QueueFull):
            await publish(engine, b"3")
        expected = [b"1", b"2"]
    else:
        res = await publish(engine, b"3")
        assert res.dropped == (policy == "DropNewest")
        assert res.dead_lettered == (policy == "RedirectToDlq")
        expected = [b"2", b"3"] if policy == "DropOldest" else [b"1", b"2"]
    got = await take(engine, count=5)
    assert [d.message.body for d in got] == expected
    stats = await engine.queue_stats("q")
    assert stats.dropped == (1 if policy in ("DropOldest", "DropNewest") else 0)
    if policy == "RedirectToDlq":
        [dlq] = await take(engine, "q.dlq")
        assert dlq.message.attributes["deadLetterReason"] == "QueueOverflow"


async def test_the_bound_counts_what_any_consumer_settled(make_engine):
    """Acked over one protocol, the backlog shrinks for every other (the issue's case: a
    queue of 2 under BlockPublisher, both acked by an HTTP-MQ-style fetch + ack)."""
    engine = make_engine(queue_snap(max_queue_size=2, overflow_policy="BlockPublisher"))
    await publish(engine, b"1")
    await engine.append("q", "a", [Message(b"2")])  # the JMQ4 / HTTP-MQ produce path
    with pytest.raises(QueueFull):
        await engine.append("q", "a", [Message(b"3")])
    fetched = await engine.fetch("q", "a")  # pull consumer: lock, read, ack
    await engine.ack("q", "a", fetched.partition, range(fetched.start, fetched.end))
    assert (await engine.queue_stats("q")).backlog == 0
    assert isinstance(await publish(engine, b"3"), AppendResult)
    assert [d.message.body for d in await take(engine)] == [b"3"]  # nothing delivered twice


async def test_retry_backoff_is_configurable(make_engine, clock):
    engine = make_engine(queue_snap(), queue_retry=QueueRetry(100, 150))
    await publish(engine, b"x")
    [d] = await take(engine, lease_ms=1000)
    await engine.fail("q", "a", 0, [d.index])
    clock.advance(0.099)
    assert await take(engine) == []
    clock.advance(0.002)
    [again] = await take(engine, lease_ms=1000)
    assert again.attempts == 2
    await engine.fail("q", "a", 0, [again.index])
    clock.advance(0.151)  # 100 ms · 2 capped at 150 ms
    assert [d.attempts for d in await take(engine)] == [3]


async def test_purge(make_engine):
    engine = make_engine(queue_snap())
    await publish(engine, b"1")
    await publish(engine, b"2")
    await take(engine, count=1)
    await engine.purge("q")
    assert (await engine.queue_stats("q")).backlog == 0
    assert await take(engine) == []
    assert await engine.bounds("q", 0) == (2, 2)


async def test_broadcast_members_each_get_every_message(make_engine):
    engine = make_engine(queue_snap(delivery_mode="FanOutWithAck"))
    await publish(engine, b"before")
    first = await take(engine, client_id="x", start="latest")
    assert first == []  # a member starts where it joined
    await take(engine, client_id="y", start="latest")
    await publish(engine, b"m1")
    x = await take(engine, client_id="x")
    y = await take(engine, client_id="y")
    assert [d.message.body for d in x] == [b"m1"] == [d.message.body for d in y]
    await engine.settle("q", "a", 0, [x[0].index], client_id="x")
    assert await take(engine, client_id="x") == []
    await engine.release("q", "a", 0, [y[0].index], client_id="y")
    assert [d.redelivered for d in await take(engine, client_id="y")] == [True]


async def _sweep_until(engine, clock, seconds: float, step: float = 0.25) -> dict[float, int]:
    """Sweep every ``step`` s of the fake clock; {elapsed: expired} of the sweeps that
    expired something."""
    out, elapsed = {}, 0.0
    while elapsed <= seconds:
        n = await engine.expire("q")
        if n:
            out[elapsed] = n
        clock.advance(step)
        elapsed += step
    return out


async def test_the_sweep_expires_each_message_at_the_first_sweep_past_its_ttl(
    make_engine, clock, monkeypatch
):
    """The sweep skips a queue until its first message left can expire, and still
    expires every message at the first sweep after its TTL (never later)."""
    from brokers.engine.sections import groups as section

    looks = []
    real = section.expire_records

    async def counted(*args, **kwargs):
        looks.append(1)
        return await real(*args, **kwargs)

    monkeypatch.setattr(section, "expire_records", counted)
    engine = make_engine(queue_snap(message_ttl_ms=4000))
    await publish(engine, b"a")  # expires at 4.0 s
    clock.advance(1.0)
    await publish(engine, b"b")  # expires at 5.0 s
    clock.advance(1.0)  # the sweeps start at 2.0 s
    expired = await _sweep_until(engine, clock, 4.0, step=0.5)
    assert expired == {2.0: 1, 3.0: 1}  # the sweeps at 4.0 s and 5.0 s
    # 9 sweeps; looks at 2.0 s, then within the clock margin (1 s) of each message's TTL
    assert len(looks) == 6
    await publish(engine, b"c")  # at 6.5 s: expires at 10.5 s
    clock.advance(2.0)  # past the skip the last look set (nothing was left then)
    assert await engine.expire("q") == 0  # a look: c is due at 10.5 s
    looks.clear()
    for _ in range(3):  # to 9.25 s: c cannot expire yet, and nothing older is left
        clock.advance(0.25)
        assert await engine.expire("q") == 0
    assert looks == []


async def test_a_group_added_is_swept_at_once(make_engine, clock):
    """A skip holds for the groups it looked at: a new consumer group (whose cursor may be
    behind) makes the next sweep look again."""
    engine = make_engine(queue_snap(message_ttl_ms=5000))
    await publish(engine, b"a")  # expires at 5 s
    assert await take(engine) != []  # group a was handed it
    clock.advance(3.0)
    assert await engine.expire("q") == 0  # nothing unhanded for a: skipped until 7 s
    snap = snapshot(
        topics={"q": {"partitions": 1, "queue": QueueSettings(message_ttl_ms=5000)}},
        consumers=[{"topic": "q", "app": "a"}, {"topic": "q", "app": "b"}],
    )
    engine.set_snapshot(snap)
    clock.advance(2.5)
    assert await engine.expire("q") == 1  # b's copy, expired before b was handed it


async def test_return_unread_marks_redelivered_only_what_was_delivered_before(make_engine):
    engine = make_engine(queue_snap())
    for body in (b"1", b"2", b"3"):
        await publish(engine, body)
    first = await take(engine, count=3)
    await engine.release("q", "a", 0, [first[0].index])  # a consumer went away with it
    again = await take(engine, count=3)
    assert [(d.message.body, d.redelivered) for d in again] == [(b"1", True)]
    # read ahead, never handed out: back unread, that lease not counted as a delivery;
    # the one delivered before stays marked
    assert await engine.return_unread("q", "a", [*again, *first[1:]]) == 3
    back = [*await take(engine, count=3), *await take(engine, count=3)]  # a lease: one range
    assert [(d.message.body, d.redelivered, d.attempts) for d in back] == [
        (b"1", True, 2),
        (b"2", False, 1),
        (b"3", False, 1),
    ]


async def test_return_unread_gives_back_the_consumed_traffic_and_rate_permits(make_engine, clock):
    snap = snapshot(
        topics={"q": {"partitions": 1, "queue": QueueSettings()}},
        consumers=[{"topic": "q", "app": "a", "rate_limit": 4}],
    )
    engine = make_engine(snap)
    start = engine.now_ms()
    for body in (b"1", b"22", b"333"):
        await publish(engine, body)
    held = await take(engine, count=3)  # read ahead: 3 of the second's 4 permits
    assert [d.message.body for d in held] == [b"1", b"22", b"333"]
    assert await engine.return_unread("q", "a", held[1:]) == 2  # only "1" was handed out
    rows = await engine.traffic("app", "a", start, engine.now_ms() + 1)
    assert sum(r.consumed for r in rows) == 1
    assert sum(r.consumed_bytes for r in rows) == len(held[0].record)
    # the two permits came back: 3 more within the same second (4 − 1)
    again = await take(engine, count=3)
    assert [d.message.body for d in again] == [b"22", b"333"]
    await publish(engine, b"4")
    assert [d.message.body for d in await take(engine, count=3)] == [b"4"]
    rows = await engine.traffic("app", "a", start, engine.now_ms() + 1)
    assert sum(r.consumed for r in rows) == 4  # each message counted once
    # a return of what is no longer leased (settled meanwhile) gives nothing back
    await engine.settle("q", "a", 0, [d.index for d in again])
    assert await engine.return_unread("q", "a", again) == 0
    rows = await engine.traffic("app", "a", start, engine.now_ms() + 1)
    assert sum(r.consumed for r in rows) == 4


async def _heard(engine, topic: str, act, within: float = 2.0) -> bool:
    """Whether ``act()`` makes the topic's notification reach a waiter within ``within`` s."""
    import asyncio

    async with engine.notifier.watch(topic) as woken:
        woken.clear()
        await act()
        try:
            await asyncio.wait_for(woken.wait(), within)
        except TimeoutError:
            return False
        return True


async def test_what_a_release_makes_due_now_is_announced_as_an_append_is(make_engine):
    """A consumer that found nothing waits for a notification: messages a release, a
    closed connection's leases or read-ahead handed back make due again are announced;
    an ack is not (nothing became due), nor a release of what was not leased."""
    engine = make_engine(queue_snap())
    for body in (b"1", b"2", b"3", b"4"):
        await publish(engine, body)
    first, second, third, fourth = await take(engine, count=4, owner="conn-1")
    ack = lambda: engine.settle("q", "a", 0, [first.index])  # noqa: E731
    assert not await _heard(engine, "q", ack, within=0.5)
    assert await _heard(engine, "q", lambda: engine.release("q", "a", 0, [second.index]))
    assert await _heard(engine, "q", lambda: engine.return_unread("q", "a", [third]))
    assert await _heard(engine, "q", lambda: engine.release_owner("q", "a", "conn-1"))
    again = lambda: engine.release("q", "a", 0, [first.index])  # noqa: E731
    assert not await _heard(engine, "q", again, within=0.5)
    assert fourth.index == 3


async def test_a_lease_says_whether_more_is_servable_at_once(make_engine, clock):
    """A consumer told "nothing more" can wait for the next notification instead of an
    empty lease; one told "more" leases again at once (a release's second run is due now,
    though a lease hands out one run at a time)."""
    engine = make_engine(queue_snap())
    for i in range(5):
        await publish(engine, b"%d" % i)
    part = await engine.lease("q", "a", count=2, owner="t")
    assert [d.index for d in part.deliveries] == [0, 1] and part.more
    rest = await engine.lease("q", "a", count=10, owner="t")
    assert [d.index for d in rest.deliveries] == [2, 3, 4] and not rest.more
    # the lease's own deadline is when something it holds may come back
    assert rest.retry_after_ms is not None and rest.retry_after_ms > engine.now_ms()
    await engine.release("q", "a", 0, [0, 3])  # two runs due again: [0, 1) and [3, 4)
    first = await engine.lease("q", "a", count=10, owner="t")
    assert [d.index for d in first.deliveries] == [0] and first.more
    second = await engine.lease("q", "a", count=10, owner="t")
    assert [d.index for d in second.deliveries] == [3] and not second.more
    assert (await engine.lease("q", "a", count=10, owner="t")).deliveries == []
    await publish(engine, b"5")
    exact = await engine.lease("q", "a", count=1, owner="t")
    assert [d.index for d in exact.deliveries] == [5] and not exact.more


async def test_a_lease_of_one_partition_says_more_while_others_were_not_looked_at(make_engine):
    engine = make_engine(snapshot(topics={"q": {"partitions": 2, "queue": QueueSettings()}}))
    await engine.append_many("q", "a", [Message(b"0")], partition=0)
    await engine.append_many("q", "a", [Message(b"1")], partition=1)
    leases = [await engine.lease("q", "a", count=10, owner="t") for _ in range(3)]
    assert sorted(lease.partition for lease in leases[:2]) == [0, 1]
    # each found one message; the first did not look at the other partition
    assert [len(lease.deliveries) for lease in leases] == [1, 1, 0]
    assert leases[0].more and not leases[2].more


async def test_an_offset_reset_is_announced_and_the_group_leases_from_it(make_engine):
    """A caught-up consumer waits for a notification; an offset reset (console, Celery)
    makes messages servable again without an append, so it is announced too."""
    engine = make_engine(queue_snap())
    for body in (b"1", b"2"):
        await publish(engine, body)
    for d in await take(engine):
        await engine.settle("q", "a", 0, [d.index])
    assert not (await engine.lease("q", "a", count=10, owner="t")).found
    reset = lambda: engine.reset_offsets("q", "a", position="earliest")  # noqa: E731
    assert await _heard(engine, "q", reset)
    assert [d.message.body for d in await take(engine)] == [b"1", b"2"]


async def test_dead_letters_go_to_the_queue_its_settings_name(make_engine, clock):
    """A queue whose settings name its dead-letter queue (VibeMQ ``deadLetterQueueName``)
    sends its dead letters there, served under its policies while no topic has the name;
    ``<queue>.dlq`` is then no queue at all."""
    engine = make_engine(
        queue_snap(max_retry_attempts=0, dead_letter_enabled=True, dead_letter_queue="graves")
    )
    await publish(engine, b"job")
    [d] = await take(engine)
    await engine.fail("q", "a", 0, [d.index])
    [dead] = await take(engine, "graves")
    assert dead.message.body == b"job"
    assert dead.message.attributes["originalQueue"] == "q"
    with pytest.raises(TopicNotFound):
        await take(engine, "q.dlq")


def test_a_snapshot_follows_renamed_and_removed_dead_letter_queues():
    def topic(dlq: str) -> TopicInfo:
        return TopicInfo(
            code="q", queue=QueueSettings(dead_letter_enabled=True, dead_letter_queue=dlq)
        )

    first = CatalogSnapshot(topics=[topic("g1")])
    assert first.dead_letter_queue_of("g1") == "q"
    renamed = first.apply(CatalogDelta(version=2, topics={"q": topic("g2")}))
    assert (renamed.dead_letter_queue_of("g1"), renamed.dead_letter_queue_of("g2")) == (None, "q")
    assert first.dead_letter_queue_of("g1") == "q"  # the old snapshot is untouched
    assert dead_letter_parent(renamed, "g2") is renamed.topics["q"]
    assert dead_letter_parent(renamed, "q.dlq") is None  # its dead letters go elsewhere
    default = renamed.apply(CatalogDelta(version=3, topics={"q": topic("")}))
    assert default.dead_letter_queue_of("g2") is None
    assert dead_letter_parent(default, "q.dlq") is default.topics["q"]
    gone = renamed.apply(CatalogDelta(version=4, topics={"q": None}))
    assert gone.dead_letter_queue_of("g2") is None


async def test_a_retry_kept_for_the_same_lessee(make_engine, clock):
    """``retry_here``: a delivery that failed (no ack in time) stays leased to its lessee
    as the next attempt, for the backoff plus a new lease (VibeMQ §7 sends the retry to
    the same connection); nobody else gets it meanwhile; past the attempt limit it is
    dead-lettered; a lease no longer the caller's is left alone."""
    engine = make_engine(queue_snap(max_retry_attempts=1, dead_letter_enabled=True))
    await publish(engine, b"one")
    await publish(engine, b"two")
    first, second = await take(engine, owner="A", lease_ms=30_000)
    assert await engine.retry_here("q", "a", first, owner="B", lease_ms=30_000) is None
    due = await engine.retry_here("q", "a", first, owner="A", lease_ms=30_000)
    assert due == engine.now_ms() + 2_000  # the backoff of attempt 1
    stats = await engine.group_stats("q", "a")
    assert (stats.in_flight, stats.retrying) == (2, 0)
    clock.advance(2.5)  # past the backoff: still A's
    assert await take(engine, owner="B") == []
    # its next failure is past the limit of one retry: dead-lettered, not kept
    assert await engine.retry_here("q", "a", first, owner="A", lease_ms=30_000) is None
    [dead] = await take(engine, "q.dlq", owner="B")
    assert dead.message.body == b"one" and dead.message.attributes["deliveryAttempts"] == "2"
    # the other delivery of the same lease is untouched, and settles as usual
    assert await engine.settle("q", "a", 0, [second.index]) == 1
    stats = await engine.group_stats("q", "a")
    assert (stats.backlog, stats.in_flight) == (0, 0)


async def test_a_kept_retry_whose_lessee_vanishes_expires_as_any_lease(make_engine, clock):
    engine = make_engine(queue_snap(max_retry_attempts=3))
    await publish(engine, b"job")
    [d] = await take(engine, owner="A", lease_ms=1_000)
    assert await engine.retry_here("q", "a", d, owner="A", lease_ms=1_000) is not None
    clock.advance(2 + 1 + 0.1)  # backoff 2 s + lease 1 s: lapsed, a failed attempt
    assert await take(engine, owner="B") == []  # now in its own backoff (4 s)
    clock.advance(4.1)
    [again] = await take(engine, owner="B")
    assert (again.index, again.attempts, again.redelivered) == (d.index, 3, True)


async def test_a_retry_is_not_kept_past_its_messages_ttl(make_engine, clock):
    """The TTL rule for a lessee's own retry lives in the engine (VibeMQ §11 forbids
    writing an expired message again): ``retry_here`` keeps nothing that would be due at
    or after the message expires — the lease lapses and the engine expires it to the DLQ
    as any lease's — and ``past_ttl`` tells a lessee holding a kept retry that its
    message expired meanwhile."""
    engine = make_engine(queue_snap(message_ttl_ms=3_000, dead_letter_enabled=True))
    await publish(engine, b"short")
    await publish(engine, b"shorter")
    [d] = await take(engine, count=1, owner="A", lease_ms=2_000)
    assert not engine.past_ttl("q", d)
    clock.advance(1.5)  # still A's; a retry due 2 s from now (attempt 1's backoff): too late
    assert await engine.retry_here("q", "a", d, owner="A", lease_ms=500) is None
    stats = await engine.group_stats("q", "a")
    assert stats.in_flight == 1  # left as it was: the lapsed lease is the engine's to expire
    clock.advance(1.6)
    assert engine.past_ttl("q", d)
    assert await engine.retry_here("q", "a", d, owner="A", lease_ms=500) is None
    assert await take(engine, owner="B") == []  # the lapsed lease: a failure, in backoff
    clock.advance(2.1)  # its backoff is over
    assert await take(engine, owner="B") == []  # both expired, neither delivered again
    dead = await take(engine, "q.dlq", owner="B")
    assert sorted(x.message.body for x in dead) == [b"short", b"shorter"]
    assert not engine.past_ttl("gone", d)


async def test_a_retry_due_within_the_ttl_is_kept(make_engine, clock):
    engine = make_engine(queue_snap(message_ttl_ms=10_000))
    await publish(engine, b"job")
    [d] = await take(engine, owner="A", lease_ms=1_000)
    clock.advance(0.6)
    assert await engine.retry_here("q", "a", d, owner="A", lease_ms=500) == engine.now_ms() + 2_000
    clock.advance(2)
    assert not engine.past_ttl("q", d)


@pytest.mark.parametrize("code", ["jobs.dlq", "graves"])
async def test_a_dead_letter_queue_keeps_no_dead_letters_of_its_own(make_engine, clock, code):
    """A topic named as a dead-letter queue (``<queue>.dlq``, or the name a queue's
    settings give) does not dead-letter into a queue of its own even with its DLQ on:
    what dies there waits in the group's dead letters."""
    dead_on = QueueSettings(max_retry_attempts=0, dead_letter_enabled=True)
    named = QueueSettings(dead_letter_enabled=True, dead_letter_queue="graves")
    engine = make_engine(
        snapshot(topics={"jobs": {"partitions": 1, "queue": named}, code: {"queue": dead_on}})
    )
    await publish(engine, b"twice dead", topic=code)
    [d] = await take(engine, code)
    await engine.fail(code, "a", 0, [d.index])
    [dead] = await engine.dead_letters(code, "a")
    assert dead.message.body == b"twice dead"
    assert await take(engine, f"{code}.dlq") == []


async def test_a_reset_and_a_reconsume_reach_every_member_of_a_fan_out_queue(make_engine, clock):
    """A fan-out queue's members each have their progress: an offset reset of the
    consumer moves each of them (and the group, which its pull consumers read) — skipping
    the backlog used to leave every subscriber where it was — and a re-consume copies for
    each member, or the one named; a member that left for good is no longer one."""
    engine = make_engine(queue_snap(delivery_mode="FanOutWithAck"))
    for member in ("x", "y", "z"):
        await engine.join("q", "a", member)
    for body in (b"1", b"2", b"3"):
        await publish(engine, body)
    await engine.leave("q", "a", "z")  # for good: its progress goes
    assert sorted(await engine.members("q", "a")) == ["x", "y"]
    assert sorted(c or "" for c in await engine.reconsumers("q", "a")) == ["x", "y"]

    await engine.reset_offsets("q", "a", position="latest")  # skip the backlog
    assert await take(engine, client_id="x") == [] == await take(engine, client_id="y")
    await publish(engine, b"4")
    assert [d.message.body for d in await take(engine, client_id="x")] == [b"4"]

    await engine.reset_offsets("q", "a", position="earliest")  # replay
    for member in ("x", "y"):
        replayed = await take(engine, client_id=member)
        assert [d.message.body for d in replayed] == [b"1", b"2", b"3", b"4"]
        await engine.settle("q", "a", 0, [d.index for d in replayed], client_id=member)

    assert await engine.reconsumers("q", "a", "x") == ["x"]
    for member in await engine.reconsumers("q", "a"):  # each member gets the copy once
        assert await engine.reconsume("q", "a", 0, 0, 1, client_id=member) == 1
    for member in ("x", "y"):
        again = await take(engine, client_id=member)
        assert [(d.message.body, d.partition) for d in again] == [(b"1", RETRY_PARTITION)]
        assert await take(engine, client_id=member) == []
    with pytest.raises(InvalidMessage):
        await engine.reconsumers("q", "a", "z")  # no member (any more)
    with pytest.raises(InvalidMessage):
        await engine.reconsumers("q", "a", "nobody")


async def test_a_member_away_past_its_keep_time_is_no_member(make_engine, clock):
    engine = make_engine(queue_snap(delivery_mode="FanOutWithAck"))
    await engine.join("q", "a", "durable")
    await engine.join("q", "a", "other")
    await engine.leave("q", "a", "durable", keep_ms=50)  # it may come back within 50 ms
    assert sorted(await engine.members("q", "a")) == ["durable", "other"]
    await asyncio.sleep(0.2)  # Redis expired its progress: gone for good
    assert await engine.members("q", "a") == ["other"]
    await engine.join("q", "a", "durable")  # a new start
    assert sorted(await engine.members("q", "a")) == ["durable", "other"]


async def test_a_fan_out_queue_without_members_reconsumes_into_its_group(make_engine):
    engine = make_engine(queue_snap(delivery_mode="FanOutWithAck"))
    assert await engine.reconsumers("q", "a") == [None]


async def test_a_fan_out_consumers_lag_is_its_slowest_members(make_engine):
    """Every member acked: no lag (the group's own progress, which no subscriber moves,
    made every fan-out consumer lag by all it ever stored, and its backlog alert fire for
    good); one member behind: its lag."""
    engine = make_engine(queue_snap(delivery_mode="FanOutWithAck"))
    assert (await engine.group_lags([("q", "a")]))[("q", "a")].lag == 0
    for member in ("x", "y"):
        await engine.join("q", "a", member)
    for body in (b"1", b"2", b"3"):
        await publish(engine, body)
    for member in ("x", "y"):
        got = await take(engine, client_id=member)
        done = got if member == "x" else got[:1]
        await engine.settle("q", "a", 0, [d.index for d in done], client_id=member)
    lag = (await engine.group_lags([("q", "a")]))[("q", "a")]
    assert (lag.lag, lag.lagging_partitions) == (2, 1) and lag.oldest_unacked_ms > 0
    rest = await take(engine, client_id="y", count=10)
    assert rest == []  # leased already: settle them
    await engine.settle("q", "a", 0, [1, 2], client_id="y")
    assert (await engine.group_lags([("q", "a")]))[("q", "a")].lag == 0


async def test_every_failure_path_counts_the_groups_consume_failures(make_engine, clock):
    """A nack (``fail``) and a VibeMQ ack timeout kept for its lessee (``retry_here``)
    each count, an ack does not; the count is per group and per minute, and a window
    leaves out what is older."""

    engine = make_engine(queue_snap(max_retry_attempts=10))
    for body in (b"1", b"2", b"3", b"4"):
        await publish(engine, body)
    got = await take(engine, count=2)
    assert await engine.fail("q", "a", 0, [got[0].index]) == 1
    await engine.settle("q", "a", 0, [got[1].index])
    assert await engine.consume_failures([("q", "a"), ("q", "b")]) == {("q", "a"): 1}
    clock.advance(61)
    [d] = await take(engine, count=1)
    assert await engine.retry_here("q", "a", d, owner="t", lease_ms=1000) is not None
    assert await engine.consume_failures([("q", "a")]) == {("q", "a"): 2}
    assert await engine.consume_failures([("q", "a")], minutes=0) == {("q", "a"): 1}
    clock.advance(3 * 3600)
    assert await engine.consume_failures([("q", "a")]) == {}


async def test_a_jmq4_retry_ack_counts_each_message_it_fails(make_engine, clock):
    from brokers.engine import RetryType

    engine = make_engine(queue_snap(max_retry_attempts=10))
    for body in (b"1", b"2", b"3"):
        await publish(engine, body)
    fetched = await engine.fetch("q", "a", count=10, owner="j")
    indexes = [m.index for m in fetched.messages]
    assert len(indexes) == 3
    await engine.ack(
        "q", "a", fetched.partition, indexes, retry_type=RetryType.EXCEPTION, owner="j",
        token=fetched.lock_token,
    )  # fmt: skip
    assert await engine.consume_failures([("q", "a")]) == {("q", "a"): 3}
    clock.advance(5)  # past the retry's backoff
    retried = await engine.fetch("q", "a", count=10, owner="j")
    assert retried.partition == RETRY_PARTITION
    await engine.ack("q", "a", RETRY_PARTITION, [retried.messages[0].index], owner="j")
    assert await engine.consume_failures([("q", "a")]) == {("q", "a"): 3}  # an ack: no


async def test_fan_out_queue_stats_count_copies_awaiting_ack(make_engine):
    """A FanOutWithAck message is complete when every copy is settled (vibemq.md §9.1):
    until then it counts in flight; message_count is what no member was handed yet — the
    number the max size bounds."""
    engine = make_engine(
        queue_snap(
            delivery_mode="FanOutWithAck", max_queue_size=3, overflow_policy="BlockPublisher"
        )
    )

    async def numbers() -> tuple[int, int, int]:
        st = await engine.queue_stats("q")
        return st.message_count, st.in_flight, st.backlog

    for body in (b"1", b"2", b"3"):
        await publish(engine, body)
    assert await numbers() == (3, 0, 3)
    for member in ("x", "y"):
        await engine.join("q", "a", member)
    x = await take(engine, client_id="x")
    assert len(x) == 3
    assert await numbers() == (0, 3, 3)  # handed to x, not acked
    await engine.settle("q", "a", 0, [d.index for d in x], client_id="x")
    assert await numbers() == (0, 3, 3)  # y's copies still wait
    for body in (b"4", b"5", b"6"):  # the bound counts what no member was handed
        await publish(engine, body)
    assert await numbers() == (3, 3, 6)
    with pytest.raises(QueueFull):
        await publish(engine, b"7")
    y = await take(engine, client_id="y")
    await engine.settle("q", "a", 0, [d.index for d in y], client_id="y")
    x = await take(engine, client_id="x")
    await engine.settle("q", "a", 0, [d.index for d in x], client_id="x")
    assert await numbers() == (0, 0, 0)
