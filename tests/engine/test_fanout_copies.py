"""``Engine.fanout_copies``: per-subscriber copies of a fan-out queue in Redis — copied to
every identity present, claimed in order, acked, released, retried with backoff, dead
past the limit, bounded, purged; two engines (two broker processes) see the same state."""

from __future__ import annotations

from brokers.engine import Delivery, Message, QueueSettings
from tests.engine.conftest import snapshot

FAN = snapshot(
    topics={"fan": {"partitions": 1, "queue": QueueSettings(delivery_mode="FanOutWithAck")}}
)


async def _take(engine, n: int) -> list[Delivery]:
    for i in range(n):
        await engine.queue_publish("fan", "a", Message(b"m%d" % i))
    return await engine.queue_take("fan", "a", count=n)


async def test_copies_per_identity_survive_another_engine(make_engine):
    one, two = make_engine(FAN), make_engine(FAN)
    copies = one.fanout_copies("fan")
    await copies.join([("app#x", "c1"), ("app#x", "c2"), ("app#y", "c3")], ttl_ms=10_000)
    got = await _take(one, 3)
    assert await copies.assign(got, max_pending=100) == (2, 0)
    again = await copies.assign(got, max_pending=100)  # a retaken batch is not copied twice
    assert again == (2, 0)

    claim = await copies.claim("app#x", count=2, lease_ms=1_000, max_retry=3)
    assert [d.message.body for d in claim.deliveries] == [b"m0", b"m1"]
    assert [d.attempts for d in claim.deliveries] == [1, 1]
    assert await copies.pending("app#x") == (1, 2)
    assert await copies.ack("app#x", [claim.deliveries[0].index]) == 1
    assert await copies.ack("app#x", [claim.deliveries[0].index]) == 0  # already settled

    # the subscriber's connection closes and it comes back through another process
    assert await copies.release("app#x", [claim.deliveries[1].index]) == 1
    other = two.fanout_copies("fan")
    back = await other.claim("app#x", count=10, lease_ms=1_000, max_retry=3)
    assert [(d.message.body, d.attempts) for d in back.deliveries] == [(b"m1", 1), (b"m2", 1)]
    # the other identity kept all three, untouched
    y = await other.claim("app#y", count=10, lease_ms=1_000, max_retry=3)
    assert [d.message.body for d in y.deliveries] == [b"m0", b"m1", b"m2"]


async def test_only_present_identities_get_copies(make_engine, clock):
    engine = make_engine(FAN)
    copies = engine.fanout_copies("fan")
    got = await _take(engine, 1)
    assert await copies.assign(got, max_pending=100) == (0, 0)  # nobody: caller releases
    await copies.join([("a#1", "c1")], ttl_ms=1_000)
    await copies.join([("a#2", "c2")], ttl_ms=5_000)
    await copies.leave("a#2", "c2")
    clock.advance(2)  # a#1's process stopped refreshing: it lapsed
    assert await copies.assign(got, max_pending=100) == (0, 0)
    await copies.join([("a#1", "c1")], ttl_ms=1_000)
    assert await copies.assign(got, max_pending=100) == (1, 0)


async def test_lapsed_lease_retries_with_backoff_then_dead(make_engine, clock):
    engine = make_engine(FAN)  # queue_retry of the fixture engine
    base = engine.queue_retry.base_ms
    copies = engine.fanout_copies("fan")
    await copies.join([("s", "c")], ttl_ms=60_000)
    await copies.assign(await _take(engine, 1), max_pending=100)
    first = await copies.claim("s", count=5, lease_ms=1_000, max_retry=1)
    assert [d.attempts for d in first.deliveries] == [1]
    clock.advance(1.0)  # the lease lapsed: a failed attempt, retry after the backoff
    waiting = await copies.claim("s", count=5, lease_ms=1_000, max_retry=1)
    assert waiting.deliveries == [] and waiting.dead == []
    assert await copies.pending("s") == (1, 0)
    clock.advance(base / 1000)
    second = await copies.claim("s", count=5, lease_ms=1_000, max_retry=1)
    assert [(d.message.body, d.attempts) for d in second.deliveries] == [(b"m0", 2)]
    clock.advance(1.0)
    done = await copies.claim("s", count=5, lease_ms=1_000, max_retry=1)
    assert done.deliveries == [] and [(d.message.body, d.attempts) for d in done.dead] == [
        (b"m0", 2)
    ]
    # not dead-lettered and acked yet (a crash): handed out as dead again after a lease
    clock.advance(1.0)
    assert len((await copies.claim("s", count=5, lease_ms=1_000, max_retry=1)).dead) == 1
    assert await copies.ack("s", [done.dead[0].index]) == 1
    assert await copies.pending("s") == (0, 0)


async def test_bounded_per_identity_and_purge(make_engine):
    engine = make_engine(FAN)
    copies = engine.fanout_copies("fan")
    await copies.join([("slow", "c"), ("fast", "d")], ttl_ms=60_000)
    got = await _take(engine, 5)
    assert await copies.assign(got, max_pending=3) == (2, 4)  # two oldest, per identity
    claim = await copies.claim("slow", count=10, lease_ms=1_000, max_retry=3)
    assert [d.message.body for d in claim.deliveries] == [b"m2", b"m3", b"m4"]
    assert await copies.purge("slow") == 3
    assert await copies.pending("slow") == (0, 0)
    assert await copies.pending("fast") == (3, 0)
    assert await copies.purge() == 3
    assert await copies.pending("fast") == (0, 0)
    assert await copies.assign(got, max_pending=3) == (0, 0)  # presence went too
