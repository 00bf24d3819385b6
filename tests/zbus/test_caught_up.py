"""A caught-up consumer of a queue MQ (queue.py): once a lease found nothing, new consumes
do not make the pump lease for it again — the MQ's next notification does (an append, or a
release), or the pump's recheck."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from brokers.servers import caught_up
from brokers.servers.zbus import queue
from tests.lease_counter import LeaseCounter
from tests.zbus.conftest import TEST_CONFIG, Broker_, Raw, msg

pytestmark = pytest.mark.django_db(transaction=True)

QUIET = dataclasses.replace(TEST_CONFIG, idle_recheck=10.0)


async def test_long_polls_of_a_caught_up_consumer_lease_nothing(catalog, redis_url) -> None:
    server = Broker_(redis_url)
    await server.start(QUIET)
    raw = await Raw.open(server.port)
    try:
        await raw.send(msg("cmd: produce", "mq: orders", "msgid: p0", body=b"m0"))
        assert (await raw.recv()).status == 200
        await raw.send(msg("cmd: consume", "mq: orders", "msgid: c0"))
        assert (await raw.recv()).body == b"m0"
        leases = LeaseCounter(server.engine)
        for i in range(1, 11):  # each parks on the empty MQ and replaces the one before
            await raw.send(msg("cmd: consume", "mq: orders", f"msgid: c{i}"))
            await asyncio.sleep(0.05)  # the pump runs for each
        await raw.send(msg("cmd: produce", "mq: orders", "msgid: p1", body=b"m1"))
        replies = [await raw.recv(3.0) for _ in range(2)]
        assert sorted(r.status for r in replies) == [200, 200]
        assert b"m1" in [r.body for r in replies]  # the append is taken at once
        assert leases.count <= 3, leases.count  # before: an empty lease per consume
    finally:
        await raw.close()
        await server.stop()


async def test_a_release_reaches_a_parked_caught_up_consumer_now(catalog, redis_url) -> None:
    """The consume parked on an MQ whose only message is in flight found nothing; when the
    holder's connection goes, the release is announced and the message comes at once, not
    after the pump's 10 s recheck."""
    server = Broker_(redis_url)
    await server.start(QUIET)
    first, second = await Raw.open(server.port), await Raw.open(server.port)
    try:
        await first.send(msg("cmd: produce", "mq: orders", "msgid: p1", body=b"precious"))
        assert (await first.recv()).status == 200
        await first.send(msg("cmd: consume", "mq: orders", "msgid: c1"))
        assert (await first.recv()).body == b"precious"
        leases = LeaseCounter(server.engine)
        await second.send(msg("cmd: consume", "mq: orders", "msgid: c2"))
        for _ in range(100):  # the pump leased for it and found nothing
            if leases.count:
                break
            await asyncio.sleep(0.01)
        await first.close()  # gone before settling it
        again = await second.recv(3.0)
        assert (again.body, again.headers.get("redelivered")) == (b"precious", "1")
    finally:
        await second.close()
        await server.stop()


async def test_a_long_poller_keeping_up_costs_one_lease_per_message(catalog, redis_url) -> None:
    """Messages produced one by one to a long poller: the lease that found one says
    nothing more is there, so its next consume parks without an empty lease."""
    server = Broker_(redis_url)
    await server.start(QUIET)
    producer, poller = await Raw.open(server.port), await Raw.open(server.port)
    try:
        await poller.send(msg("cmd: consume", "mq: orders", "msgid: c0"))
        await asyncio.sleep(0.1)
        leases = LeaseCounter(server.engine)
        for i in range(10):
            await producer.send(msg("cmd: produce", "mq: orders", f"msgid: p{i}", body=b"m%d" % i))
            assert (await producer.recv()).status == 200
            assert (await poller.recv(3.0)).body == b"m%d" % i
            await poller.send(msg("cmd: consume", "mq: orders", f"msgid: c{i + 1}"))
            await asyncio.sleep(0.02)  # the pump runs for the new consume
        assert leases.count <= 12, leases.count  # before: two per message, one of them empty
    finally:
        await producer.close()
        await poller.close()
        await server.stop()


async def test_an_offset_reset_reaches_a_parked_caught_up_consumer_now(catalog, redis_url) -> None:
    """Offsets reset to the earliest message (an operator replaying a queue): the parked
    long poll gets the replay at once, not at the pump's 10 s recheck."""
    server = Broker_(redis_url)
    await server.start(QUIET)
    raw = await Raw.open(server.port)
    try:
        await raw.send(msg("cmd: produce", "mq: orders", "msgid: p0", body=b"again"))
        assert (await raw.recv()).status == 200
        await raw.send(msg("cmd: consume", "mq: orders", "msgid: c0"))
        assert (await raw.recv()).body == b"again"
        leases = LeaseCounter(server.engine)
        await raw.send(msg("cmd: consume", "mq: orders", "msgid: c1"))  # settles, parks
        for _ in range(100):  # the pump leased for it and found nothing
            if leases.count:
                break
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.1)
        [session] = server.server.ctx.queues["orders"].sessions.values()
        await server.engine.reset_offsets("orders", session.app, position="earliest")
        replay = await raw.recv(3.0)
        assert (replay.body, replay.msgid) == (b"again", "c1")
    finally:
        await raw.close()
        await server.stop()


async def test_a_parked_caught_up_consumer_is_not_leased_for_at_every_recheck(
    catalog, redis_url, monkeypatch
) -> None:
    """The pump's recheck made every caught-up consumer lease again; releases, resets and
    appends are announced, so the rechecks lease nothing until the catalog changes or the
    safety net's turn comes."""
    monkeypatch.setattr(caught_up, "RECHECK_S", 1000.0)  # the safety net out of the window
    server = Broker_(redis_url)
    await server.start(dataclasses.replace(TEST_CONFIG, idle_recheck=0.1))
    raw = await Raw.open(server.port)
    try:
        leases = LeaseCounter(server.engine)
        await raw.send(msg("cmd: consume", "mq: orders", "msgid: c0"))  # parks: MQ empty
        await asyncio.wait_for(leases.answered.wait(), 5.0)  # its lease found nothing
        await asyncio.sleep(0.05)
        leases.count = 0
        await asyncio.sleep(0.8)  # 8 rechecks
        assert leases.count == 0, leases.count
        await raw.send(msg("cmd: produce", "mq: orders", "msgid: p0", body=b"now"))
        replies = [await raw.recv(3.0) for _ in range(2)]
        assert b"now" in [r.body for r in replies]
    finally:
        await raw.close()
        await server.stop()


async def test_a_pump_that_crashes_restarts_after_a_pause_not_in_a_loop(
    catalog, redis_url, monkeypatch
) -> None:
    """A queue pump that stops on an unexpected error starts again after PUMP_RESTART_S
    while a consume waits (before: the consume waited for the client's next one), and not
    at once (a fault that recurs must not spin the process)."""
    monkeypatch.setattr(queue, "PUMP_RESTART_S", 0.3)
    real = queue.QueueMq._lease_size
    fault = {"on": True, "calls": 0}

    def faulty(self, key, want):
        fault["calls"] += 1
        if fault["on"]:
            raise RuntimeError("a bug")
        return real(self, key, want)

    monkeypatch.setattr(queue.QueueMq, "_lease_size", faulty)
    server = Broker_(redis_url)
    await server.start(QUIET)
    raw = await Raw.open(server.port)
    try:
        await raw.send(msg("cmd: produce", "mq: orders", "msgid: p0", body=b"kept"))
        assert (await raw.recv()).status == 200
        await raw.send(msg("cmd: consume", "mq: orders", "msgid: c0"))
        await asyncio.sleep(1.0)
        assert 2 <= fault["calls"] <= 5, fault["calls"]
        fault["on"] = False
        reply = await raw.recv(3.0)  # the same consume, not sent again
        assert (reply.status, reply.body) == (200, b"kept")
    finally:
        await raw.close()
        await server.stop()


async def test_an_idle_pubsub_subscriber_is_not_polled(catalog, redis_url) -> None:
    """A pub/sub pump with nothing to send read the MQ's end every idle_recheck (5,000
    idle pub/sub MQs: 1,000 reads a second); appends are announced, so it sleeps until
    one — and a produce still reaches the subscriber at once."""
    server = Broker_(redis_url)
    await server.start(dataclasses.replace(TEST_CONFIG, idle_recheck=0.1))
    sub, pub = await Raw.open(server.port), await Raw.open(server.port)
    reads = {"n": 0}
    real_bounds = server.engine.bounds

    async def counted(*args, **kwargs):
        reads["n"] += 1
        return await real_bounds(*args, **kwargs)

    server.engine.bounds = counted
    try:
        await sub.send(msg("cmd: consume", "mq: news", "msgid: s", "topic: *", "window: -1"))
        await asyncio.sleep(0.3)
        reads["n"] = 0
        await asyncio.sleep(0.8)  # 8 idle_recheck periods
        assert reads["n"] == 0, reads["n"]  # before: 8
        await pub.send(msg("cmd: produce", "mq: news", "msgid: n0", body=b"fresh"))
        assert (await pub.recv()).status == 200
        assert (await sub.recv(2.0)).body == b"fresh"
    finally:
        for r in (sub, pub):
            await r.close()
        await server.stop()
