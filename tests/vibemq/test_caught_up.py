"""A caught-up consumer (hub.py): once a lease left nothing servable, neither the acks
that free its subscribers' room nor the timer's ticks make it lease again — the queue's
next notification does: an append, or a release that made messages due at once, on any
broker. A lease that says more is servable is followed by another at once."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace

from asgiref.sync import sync_to_async

from brokers.catalog_loader import publish as publish_catalog
from brokers.clients.vibemq import VibeMQClient
from brokers.engine import StoreUnavailable
from brokers.servers import caught_up
from brokers.servers.vibemq import hub
from tests.lease_counter import LeaseCounter
from tests.vibemq.conftest import FAST, Broker, pause_consumers

QUIET = replace(FAST, timer_interval=5.0, ack_timeout_ms=30_000)
"""The timer (which also clears a caught-up mark) out of the way of what is measured."""


async def _broker(redis_url: str, broker_id: int) -> Broker:
    b = Broker(broker_id, redis_url)
    await b.start(QUIET)
    return b


async def test_acks_of_a_caught_up_subscriber_lease_nothing(catalog, redis_url):
    one = await _broker(redis_url, 1)
    c = await VibeMQClient.open("127.0.0.1", one.port, catalog.token)
    try:
        await c.create_queue("calm")
        for i in range(10):
            await c.publish("calm", i, message_id=f"c{i}")
        await c.subscribe("calm")
        got = [await c.receive(3) for _ in range(10)]
        await c.ping()
        leases = LeaseCounter(one.engine)
        for m in got:  # acked one by one, each read on its own
            c.ack(m.id)
            await c.ping()
        assert leases.count <= 2, leases.count  # before: a lease per ack, each finding nothing
        await c.publish("calm", 10, message_id="c10")  # the next append is taken at once
        assert (await c.receive(3)).id == "c10"
    finally:
        await c.close()
        await one.stop()


async def test_a_release_on_another_broker_reaches_a_caught_up_subscriber_now(catalog, redis_url):
    """The release is announced across brokers; a lease hands out one run due again at a
    time, and the engine says more is due, so the dispatcher leases the next run at once
    — not at an ack (this subscriber acks nothing) or its timer."""
    one, two = await _broker(redis_url, 1), await _broker(redis_url, 2)
    holder = await VibeMQClient.open("127.0.0.1", two.port, catalog.token)
    waiting = await VibeMQClient.open("127.0.0.1", one.port, catalog.token)
    try:
        await holder.create_queue("runs")
        await holder.subscribe("runs")
        held = []
        for i in range(3):  # leased one at a time: three ranges, three runs when released
            await holder.publish("runs", i, message_id=f"r{i}")
            held.append(await holder.receive(3))
        await one.watcher.refresh()
        leases = LeaseCounter(one.engine)
        await waiting.subscribe("runs")
        await asyncio.wait_for(leases.answered.wait(), 3)  # its dispatcher found nothing
        await asyncio.sleep(0.1)
        start = time.monotonic()
        await holder.close()
        got = [await waiting.receive(3) for _ in range(3)]  # never acked
        assert sorted(m.id for m in got) == sorted(m.id for m in held)
        assert time.monotonic() - start < QUIET.timer_interval / 2  # not the timer's look
    finally:
        await waiting.close()
        await one.stop()
        await two.stop()


async def test_a_subscriber_keeping_up_costs_one_lease_per_message(catalog, redis_url):
    """Messages published one by one to a subscriber that acks each: the lease that found
    one says nothing more is there, so the ack does not lease again (an empty lease)."""
    one = await _broker(redis_url, 1)
    producer = await VibeMQClient.open("127.0.0.1", one.port, catalog.token)
    c = await VibeMQClient.open("127.0.0.1", one.port, catalog.token)
    try:
        await producer.create_queue("steady")
        await c.subscribe("steady")
        await c.ping()
        leases = LeaseCounter(one.engine)
        for i in range(10):
            await producer.publish("steady", i, message_id=f"s{i}")
            m = await c.receive(3)
            assert m.id == f"s{i}"
            c.ack(m.id)
            await c.ping()
        assert leases.count <= 12, leases.count  # before: two per message, one of them empty
    finally:
        await producer.close()
        await c.close()
        await one.stop()


async def test_acks_of_caught_up_fan_out_members_lease_nothing(catalog, redis_url):
    """FanOutWithAck: each member leases from its own progress. An ack wakes the queue's
    dispatcher; a member whose lease left nothing servable is not leased for on it — with
    N members each message cost up to N leases per ack, almost all of them empty."""
    one = await _broker(redis_url, 1)
    pub = await VibeMQClient.open("127.0.0.1", one.port, catalog.token)
    subs = [
        await VibeMQClient.open("127.0.0.1", one.port, catalog.token, client_id=f"m{i}")
        for i in range(5)
    ]
    try:
        await pub.create_queue("wide", deliveryMode="FanOutWithAck")
        for sub in subs:
            await sub.subscribe("wide")
            await sub.ping()
        await asyncio.sleep(0.1)
        leases = LeaseCounter(one.engine)
        for i in range(4):
            await pub.publish("wide", i, message_id=f"w{i}")
            for sub in subs:
                m = await sub.receive(3)
                assert m.id == f"w{i}"
                sub.ack(m.id)
            for sub in subs:
                await sub.ping()
        # one lease per member and message (4 × 5), and a few more while rounds overlap;
        # before: 58
        assert leases.count <= 30, leases.count
    finally:
        for c in (pub, *subs):
            await c.close()
        await one.stop()


async def _until(counter: LeaseCounter, at_least: int) -> None:
    for _ in range(150):  # 3 s
        if counter.count >= at_least:
            return
        await asyncio.sleep(0.02)


async def _settled(engine, quiet_s: float = 0.3, within_s: float = 5.0) -> None:
    """Wait until ``engine`` made no lease for ``quiet_s``: what the queues' creation and
    subscription set off (catalog versions reaching the dispatchers, first leases) is done
    — on a loaded machine that takes longer than on a quiet one."""
    deadline = asyncio.get_running_loop().time() + within_s
    while asyncio.get_running_loop().time() < deadline:
        probe = LeaseCounter(engine)
        await asyncio.sleep(quiet_s)
        if probe.count == 0:
            return


async def _acked(engine, queue: str, within_s: float = 5.0) -> None:
    """Wait until nothing of ``queue`` is in flight: the ack reached the engine (on a
    loaded machine later than a quiet spell of :func:`_settled` may take)."""
    deadline = asyncio.get_running_loop().time() + within_s
    while (await engine.queue_stats(queue)).in_flight:
        assert asyncio.get_running_loop().time() < deadline, f"{queue}: the ack never settled"
        await asyncio.sleep(0.02)


async def test_idle_subscribed_queues_do_not_wake_at_every_tick(catalog, redis_url, monkeypatch):
    """Every timer tick made each caught-up consumer lease again (an idle subscribed queue
    cost an empty lease a second, for ever), and then still woke its dispatcher (5,000 idle
    queues: a third of a core); a catalog change made every dispatcher lease again, though
    it concerned one queue. What makes messages servable is announced, so an idle
    dispatcher sleeps — and a publish, or a change to its queue's consumers, still wakes it
    at once."""
    monkeypatch.setattr(caught_up, "RECHECK_S", 1000.0)  # the safety net out of the window
    rounds = {"n": 0}
    real_round = hub.QueueDispatcher._round

    async def counted(self):
        rounds["n"] += 1
        return await real_round(self)

    monkeypatch.setattr(hub.QueueDispatcher, "_round", counted)
    b = Broker(1, redis_url)
    await b.start(replace(QUIET, timer_interval=0.1))
    c = await VibeMQClient.open("127.0.0.1", b.port, catalog.token)
    try:
        for i in range(10):
            await c.create_queue(f"idle{i}")
            await c.subscribe(f"idle{i}")
        await c.ping()
        await _settled(b.engine)
        leases = LeaseCounter(b.engine)
        rounds["n"] = 0
        await asyncio.sleep(0.8)  # 8 ticks of 10 dispatchers
        assert leases.count == 0, leases.count  # before: 80
        assert rounds["n"] == 0, rounds["n"]  # before: 80
        await c.publish("idle3", "wake", message_id="w")
        assert (await c.receive(3)).id == "w"
        c.ack("w")
        await _acked(b.engine, "idle3")
        await _settled(b.engine)  # the lease after the ack is done
        version = b.watcher.current.version
        leases = LeaseCounter(b.engine)
        await sync_to_async(publish_catalog)()  # a new catalog version, no queue's concern
        for _ in range(150):
            if b.watcher.current.version != version:
                break
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.3)
        assert leases.count == 0, leases.calls  # before: 10
        await sync_to_async(pause_consumers)("idle5", True)  # idle5's consumer: paused, resumed
        await _until(leases, 1)
        assert not b.engine.authorize_consumer("idle5", "app1")
        await sync_to_async(pause_consumers)("idle5", False)
        await _until(leases, 2)
        await asyncio.sleep(0.3)
        assert leases.count == 2, leases.count  # idle5's dispatcher only, once per change
        await c.publish("idle5", "resumed", message_id="r")
        assert (await c.receive(3)).id == "r"
    finally:
        await c.close()
        await b.stop()


async def test_a_lease_that_failed_is_tried_again_soon_not_at_the_next_append(
    catalog, redis_url, monkeypatch
):
    """A dispatcher sleeps until something is due; one whose lease failed (Redis blinked
    while its notification link stayed up) must not wait for the queue's next append."""
    monkeypatch.setattr(caught_up, "RECHECK_S", 1000.0)  # the safety net out of the window
    b = Broker(1, redis_url)
    await b.start(replace(QUIET, timer_interval=0.1))
    c = await VibeMQClient.open("127.0.0.1", b.port, catalog.token)
    real_lease = b.engine.lease
    failures = {"left": 1}

    async def blinking(*args, **kwargs):
        if failures["left"]:
            failures["left"] -= 1
            raise StoreUnavailable("Redis blinked")
        return await real_lease(*args, **kwargs)

    try:
        await c.create_queue("blink")
        await c.subscribe("blink")
        await c.ping()
        await asyncio.sleep(0.3)  # caught up: the dispatcher sleeps
        monkeypatch.setattr(b.engine, "lease", blinking)
        await c.publish("blink", "once", message_id="b")
        assert (await c.receive(2)).id == "b"
        assert failures["left"] == 0
    finally:
        await c.close()
        await b.stop()


async def test_a_dispatcher_that_crashes_restarts_after_a_pause_not_in_a_loop(
    catalog, redis_url, monkeypatch
):
    """A dispatcher that stops on an unexpected error starts again (its subscribers are
    served once the fault is gone), after hub.RESTART_S, not at once: a fault that recurs
    at every start spun the process and filled the log."""
    monkeypatch.setattr(hub, "RESTART_S", 0.3)
    real_round = hub.QueueDispatcher._round
    fault = {"on": True, "rounds": 0}

    async def faulty(self):
        fault["rounds"] += 1
        if fault["on"]:
            raise RuntimeError("a bug")
        return await real_round(self)

    monkeypatch.setattr(hub.QueueDispatcher, "_round", faulty)
    b = Broker(1, redis_url)
    await b.start(QUIET)
    c = await VibeMQClient.open("127.0.0.1", b.port, catalog.token)
    try:
        await c.create_queue("crashy")
        await c.publish("crashy", "kept", message_id="k")
        await c.subscribe("crashy")
        await asyncio.sleep(1.0)
        assert 2 <= fault["rounds"] <= 5, fault["rounds"]  # once per restart, not a spin
        fault["on"] = False
        assert (await c.receive(3)).id == "k"
    finally:
        await c.close()
        await b.stop()


async def test_a_restarted_dispatcher_finds_what_was_published_while_it_was_down(
    catalog, redis_url, monkeypatch
):
    """A dispatcher that crashed on a round no notification started (a subscriber joined)
    starts again RESTART_S later; what was published in between was announced to nobody,
    and its consumer's caught-up mark was still set: the message waited for the safety
    net's recheck (120 s). A dispatcher looks again once it watches."""
    monkeypatch.setattr(hub, "RESTART_S", 0.5)
    real_round = hub.QueueDispatcher._round
    fault = {"left": 0}

    async def faulty(self):
        if fault["left"]:
            fault["left"] -= 1
            raise RuntimeError("a bug")
        return await real_round(self)

    monkeypatch.setattr(hub.QueueDispatcher, "_round", faulty)
    b = await _broker(redis_url, 1)
    c = await VibeMQClient.open("127.0.0.1", b.port, catalog.token)
    other = await VibeMQClient.open("127.0.0.1", b.port, catalog.token)
    try:
        await c.create_queue("down")
        await c.subscribe("down")
        await c.ping()
        await asyncio.sleep(0.3)  # caught up: the dispatcher sleeps
        fault["left"] = 1
        await other.subscribe("down")  # the round it starts crashes the dispatcher
        await asyncio.sleep(0.1)
        assert fault["left"] == 0
        await c.publish("down", "meanwhile", message_id="m")
        got = await asyncio.wait_for(
            asyncio.gather(c.receive(3), other.receive(3), return_exceptions=True), 4
        )
        assert [g.id for g in got if not isinstance(g, BaseException)] == ["m"]
    finally:
        await other.close()
        await c.close()
        await b.stop()
