"""Claims: an append of a process whose own parked waiter will take it names the groups it
claims, and other processes' waiters that serve only those groups wake a grace later
instead of at once (brokers.engine.notify). Two notifiers (two origins) on one Redis stand
for two broker processes."""

from __future__ import annotations

import asyncio
import time

import pytest
import redis.asyncio as aioredis
from hypothesis import given
from hypothesis import strategies as st
from redis.asyncio.cluster import RedisCluster

from brokers.engine import Engine, Message
from brokers.engine.keys import notify_channel
from brokers.engine.notify import CLAIM_GRACE, EARLY_IDLE, Notifier, notice, parse_notice
from brokers.engine.redisio import broker_client
from tests.engine.conftest import snapshot

NAMES = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,20}", fullmatch=True)


@given(
    st.integers(0, 10_000),
    st.text("0123456789abcdef", min_size=1, max_size=12),
    st.lists(NAMES, max_size=5),
)
def test_a_notice_reads_back_as_written(partition, origin, groups):
    text = notice(partition, origin, groups)
    assert parse_notice(text) == (partition, origin, frozenset(groups))
    assert parse_notice(text.encode()) == (partition, origin, frozenset(groups))


@pytest.mark.parametrize(
    ("data", "partition"),
    [(b"3", 3), ("7", 7), (5, 5), (b"", None), (b"retry", None), (b"\xff\xfe", None), (None, None)],
)
def test_notifications_without_claims_read_as_before(data, partition):
    assert parse_notice(data) == (partition, "", frozenset())


@pytest.fixture
async def client(redis_url):
    """A client of the session's Redis, closed after the test."""
    client = aioredis.from_url(redis_url)
    yield client
    await client.aclose()


@pytest.fixture
async def here(client):
    """A notifier: this process."""
    notifier = Notifier(client)
    yield notifier
    await notifier.close()


@pytest.fixture
async def there(client):
    """Another notifier on the same Redis: another process."""
    notifier = Notifier(client)
    yield notifier
    await notifier.close()


async def _publish(client, topic: str, data: object) -> None:
    await client.publish(notify_channel(topic), data)


async def _quiet(seconds: float = 0.2) -> None:
    await asyncio.sleep(seconds)


async def test_a_claimed_notification_wakes_the_claimant_at_once_and_others_a_grace_later(
    client,
    here,
    there,
):
    assert here.origin != there.origin
    async with (
        here.watch("t") as local,
        there.watch("t") as remote,
        there.watch("t") as remote_other,
        there.watch("t") as remote_unknown,
        there.watch("t", "a\nclient") as fetcher,
    ):
        local.park({"a": 1})
        remote.park({"a": 4})
        remote_other.park({"a": 1}, serves=["b"])  # serves b too: b was not claimed
        # remote_unknown never parked: it does not say what it serves
        said = here.claim("t", 2, 1)
        assert parse_notice(said) == (2, here.origin, frozenset({"a"}))
        started = time.monotonic()
        await _publish(client, "t", said)
        await asyncio.wait_for(local.wait(), 2)
        await asyncio.wait_for(remote_other.wait(), 2)
        await asyncio.wait_for(remote_unknown.wait(), 2)
        await asyncio.wait_for(fetcher.wait(), 2)  # fetchers do not take part in claims
        assert not remote.is_set()
        await asyncio.wait_for(remote.wait(), 2)
        assert time.monotonic() - started >= CLAIM_GRACE * 0.9
        assert remote.take() == {2} and local.take() == {2}
        assert there.wakes_skipped == 1 and here.claims_made == 1


async def test_claims_spend_the_capacity_parked_and_streaming_groups_always_claim(here):
    async with here.watch("t") as waiter, here.watch("t") as streamer:
        assert here.claim("t", 0, 1) == "0"  # nobody parked
        waiter.park({"a": 2, "b": 0})
        assert parse_notice(here.claim("t", 0, 1))[2] == {"a"}
        assert here.claim("t", 0, 2) == "0"  # one left: a batch of two is not taken
        assert parse_notice(here.claim("t", 1, 1))[2] == {"a"}
        assert here.claim("t", 1, 1) == "1"  # spent
        waiter.park({"a": 5})
        waiter.hint(0)  # woken: it is leasing, nothing can be claimed for it
        assert here.claim("t", 0, 1) == "0"
        streamer.stream(["s"])  # takes whatever comes, parked or not
        for _ in range(3):
            assert parse_notice(here.claim("t", 0, 100))[2] == {"s"}
        streamer.park({"a": 1})
        assert parse_notice(here.claim("t", 0, 1))[2] == {"s", "a"}
        assert streamer.serves == {"s", "a"}
        assert here.claim("other", 0, 1) == "0"


async def test_a_process_does_not_defer_its_own_waiters_for_its_own_claim(client, here):
    async with here.watch("t") as a, here.watch("t") as b:
        a.park({"g": 1})
        b.park({"g": 1})
        await _publish(client, "t", here.claim("t", 0, 1))
        await asyncio.wait_for(asyncio.gather(a.wait(), b.wait()), 2)
        assert here.wakes_skipped == 0


async def test_a_waiter_gone_before_the_grace_ends_is_not_woken(client, here, there):
    async with there.watch("t") as stays:
        stays.park({"a": 1})
        async with there.watch("t") as leaves:
            leaves.park({"a": 1})
            with_claim = notice(0, here.origin, ["a"])
            await _publish(client, "t", with_claim)
            await _quiet(CLAIM_GRACE / 3)
            assert not leaves.is_set()
        await asyncio.wait_for(stays.wait(), 2)
        assert stays.take() == {0}
        assert there.parked("t") == 1


async def test_a_claim_its_process_did_not_honour_is_served_by_another(make_engine, clock):
    """Process A's pump parked able to take one message of group a, then died before
    leasing what A appended: B's consumer of a gets it after the grace, nothing is lost."""
    a = make_engine(snapshot(topics={"t": {"partitions": 1}}))
    b = make_engine(snapshot(topics={"t": {"partitions": 1}}))
    assert a.notifier.origin != b.notifier.origin
    async with b.notifier.watch("t") as remote:
        remote.park({"a": 8})
        async with a.notifier.watch("t") as doomed:
            doomed.park({"a": 8})
            started = time.monotonic()
            await a.append("t", "a", [Message(b"claimed")])
            await asyncio.wait_for(doomed.wait(), 2)  # A's own waiter was told at once
        # ... and A "crashed": nobody leases on A's side
        await asyncio.wait_for(remote.wait(), 2)
        assert time.monotonic() - started >= CLAIM_GRACE * 0.9
        assert remote.take() == {0}
        lease = await b.lease("t", "a", count=8, owner="b")
        assert [d.index for d in lease.deliveries] == [0]
        assert b.notifier.wakes_skipped == 1 and a.notifier.claims_made == 1


async def test_claims_a_waiter_cannot_take_are_handed_back(here, there):
    """A waiter that parks again without room for a group claimed for it — and whose
    lease did not find the group empty — leaves the claim behind: it announces the topic
    and the other processes' waiters look at once, not a grace later."""
    async with here.watch("t") as pump, there.watch("t") as remote:
        pump.park({"a": 1, "b": 1})
        remote.park({"a": 1})
        here.claim("t", 0, 1)
        assert pump.claims == {"a", "b"}
        # its consumers of a left; b's lease found nothing more (settled)
        assert pump.park({}, serves=["b"], settled=["b"]) == {"a"}
        assert pump.claims == set() and pump.left_behind() == set()
        pump.park({"a": 1})
        here.claim("t", 0, 1)
        assert pump.park({"a": 1}) == set()  # room again: it takes what comes
        pump.stream(["s"])
        here.claim("t", 0, 1)
        assert pump.left_behind() == set()  # a streaming group takes everything
        started = time.monotonic()
        await here.announce("t")
        await asyncio.wait_for(remote.wait(), 2)
        assert time.monotonic() - started < CLAIM_GRACE
        assert remote.take() is None  # a full look
        assert here.claims_left == 1


async def test_an_announcement_that_cannot_be_sent_is_only_logged(caplog):
    dead = aioredis.Redis(port=1, socket_connect_timeout=0.2)
    notifier = Notifier(dead)
    try:
        await notifier.announce("t")  # no exception: the grace covers it
        assert "could not announce t" in caplog.text
    finally:
        await dead.aclose()


async def test_an_early_claim_wakes_the_claimant_before_the_append_is_answered(client, here):
    """claim(early=True): the claimants are woken in the next loop turn, before any
    notification; the notification then does not wake them again but a grace later."""
    async with here.watch("t") as pump, here.watch("t", "fetchers") as other:
        pump.park({"a": 2})  # a fetcher claims nothing: the notification wakes it
        # just parked: busy, left to the notification (appends gather for one lease)
        assert "/" not in parse_notice(here.claim("t", 3, 1, early=True))[1]
        await asyncio.sleep(0)
        assert not pump.is_set()
        await asyncio.sleep(EARLY_IDLE * 2)  # parked a while: idle
        said = here.claim("t", 3, 1, early=True)
        partition, origin, groups = parse_notice(said)
        assert (partition, groups) == (3, {"a"}) and origin.startswith(here.origin + "/")
        assert not pump.is_set()
        await asyncio.sleep(0)  # the next turn
        assert pump.is_set() and pump.take() == {3} and not other.is_set()
        started = time.monotonic()
        await _publish(client, "t", said)  # the append's notification
        await asyncio.wait_for(other.wait(), 2)
        assert not pump.is_set()
        await asyncio.wait_for(pump.wait(), 2)  # a look a grace later, in case
        assert time.monotonic() - started >= CLAIM_GRACE * 0.9
        assert here._early == {}


async def test_a_lease_made_on_an_early_wake_finds_the_append(make_engine, store):
    """The early wake's premise: on a single Redis the append is queued on the pipelined
    connection before the claimant can lease, so its lease — made before the append was
    answered — already finds the message."""
    engine = make_engine(snapshot(topics={"t": {"partitions": 1}}))
    early = not isinstance(store, RedisCluster)
    async with engine.notifier.watch("t") as pump:
        pump.park({"a": 1})
        await asyncio.sleep(EARLY_IDLE * 2)
        append = asyncio.create_task(engine.append("t", "a", [Message(b"now")]))
        await asyncio.wait_for(pump.wait(), 2)
        if early:
            assert not append.done()  # woken before the append's reply
            lease = await engine.lease("t", "a", count=1, owner="o")
            assert [d.index for d in lease.deliveries] == [0]
        await append


async def test_after_a_redis_restart_a_lease_on_an_early_wake_still_finds_the_append(redis_url):
    """A restarted Redis knows no script. Every new pipelined connection loads them first
    (brokers.engine.multiplex.send_first): without that the append met NOSCRIPT and went
    again behind the lease of the claimant it woke early, which found nothing (the message
    then waited for the claim's grace)."""
    client = broker_client(redis_url, max_connections=8)  # as a broker's
    admin = aioredis.from_url(redis_url)
    snap = snapshot(topics={"t": {"partitions": 1}})
    engine = Engine(client, lambda: snap)
    try:
        await client.flushall()
        await engine.append("t", "a", [Message(b"before")])  # scripts loaded, connection up
        first = await engine.lease("t", "a", count=1, owner="o")
        assert [d.index for d in first.deliveries] == [0]
        await admin.script_flush()  # what a restart leaves: no script, every connection gone
        await admin.execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
        await asyncio.sleep(0.1)  # the multiplexed connection's reader saw it close
        # consumers lease on (the lease script is back), then the first append comes
        assert not (await engine.lease("t", "a", count=1, owner="o")).deliveries
        async with engine.notifier.watch("t") as pump:
            pump.park({"a": 1})
            await asyncio.sleep(EARLY_IDLE * 2)
            append = asyncio.create_task(engine.append("t", "a", [Message(b"after")]))
            await asyncio.wait_for(pump.wait(), 2)
            assert not append.done()  # woken before the append's reply
            lease = await engine.lease("t", "a", count=1, owner="o")
            assert [d.index for d in lease.deliveries] == [1]
            await append
    finally:
        await engine.close()
        await admin.aclose()
        await client.aclose()
