"""Read-ahead of RoundRobin queues (hub.py): a consumer keeps up to ``READ_AHEAD``
deliveries leased beyond its subscribers' room, so an ack's freed slot is filled from
memory. What waits there must never be stuck: it goes back to the group unread (not a
delivery attempt) when its hold passes, when the consumer's last subscriber leaves, and when
the consumer is paused."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import replace

from asgiref.sync import sync_to_async

from brokers.clients.vibemq import VibeMQClient
from brokers.servers.readahead import ReadAheadBudget, footprint
from brokers.servers.vibemq.hub import READ_AHEAD_HOLD_S
from tests.vibemq.conftest import FAST, Broker, pause_consumers

SLOW_ACKS = replace(FAST, max_unacked_per_subscriber=2, ack_timeout_ms=30_000)


async def _receive_all(client: VibeMQClient, n: int, within: float) -> list:
    got = []
    deadline = time.monotonic() + within
    while len(got) < n:
        got.append(await client.receive(max(0.01, deadline - time.monotonic())))
        client.ack(got[-1].id)
    return got


async def _broker(redis_url: str, broker_id: int, config=FAST, **start) -> Broker:
    b = Broker(broker_id, redis_url)
    await b.start(config, **start)
    return b


@contextlib.asynccontextmanager
async def _subscriber_broker(
    catalog, redis_url: str, **start
) -> AsyncIterator[tuple[Broker, VibeMQClient]]:
    """Broker 1 (two unacked per subscriber) and a client on it; both stopped after."""
    one = await _broker(redis_url, 1, SLOW_ACKS, **start)
    a = await VibeMQClient.open("127.0.0.1", one.port, catalog.token)
    try:
        yield one, a
    finally:
        await a.close()
        await one.stop()


async def test_read_ahead_past_its_hold_goes_to_another_brokers_subscriber(catalog, redis_url):
    one, two = await _broker(redis_url, 1, SLOW_ACKS), await _broker(redis_url, 2)
    a = await VibeMQClient.open("127.0.0.1", one.port, catalog.token)
    b = await VibeMQClient.open("127.0.0.1", two.port, catalog.token)
    try:
        for i in range(10):
            await a.publish("ra", i, message_id=f"m{i}")
        await a.subscribe("ra")
        held = [await a.receive(), await a.receive()]  # its room is 2: the rest read ahead
        assert [m.id for m in held] == ["m0", "m1"]
        await two.watcher.refresh()
        await b.subscribe("ra")
        start = time.monotonic()
        rest = await _receive_all(b, 8, within=READ_AHEAD_HOLD_S + 4)
        assert sorted(m.id for m in rest) == [f"m{i}" for i in range(2, 10)]
        assert {m.attempts for m in rest} == {1}  # back unread: not a delivery attempt
        assert time.monotonic() - start >= READ_AHEAD_HOLD_S * 0.5  # held, then let go
    finally:
        await a.close()
        await b.close()
        await one.stop()
        await two.stop()


async def test_a_leaving_subscribers_read_ahead_goes_back_at_once(catalog, redis_url):
    one, two = await _broker(redis_url, 1, SLOW_ACKS), await _broker(redis_url, 2)
    b = await VibeMQClient.open("127.0.0.1", two.port, catalog.token)
    try:
        a = await VibeMQClient.open("127.0.0.1", one.port, catalog.token)
        for i in range(10):
            await a.publish("gone", i, message_id=f"g{i}")
        await a.subscribe("gone")
        await a.receive()
        await a.receive()
        await asyncio.sleep(0.1)  # the dispatcher has read the rest ahead by now
        await a.close()  # its 2 in flight and its read-ahead: back to the group
        await two.watcher.refresh()
        await b.subscribe("gone")
        got = await _receive_all(b, 10, within=5)  # not after the 30 s lease
        assert sorted(m.id for m in got) == sorted(f"g{i}" for i in range(10))
    finally:
        await b.close()
        await one.stop()
        await two.stop()


async def test_a_pause_holds_back_what_was_read_ahead(catalog, redis_url):
    async with _subscriber_broker(catalog, redis_url) as (one, a):
        for i in range(6):
            await a.publish("halt", i, message_id=f"h{i}")
        await a.subscribe("halt")
        first = [await a.receive(), await a.receive()]
        await asyncio.sleep(0.1)  # read ahead: h2..h5
        await sync_to_async(pause_consumers)("halt", True)
        app = one.engine.catalog.consumers_of("halt")[0].app
        for _ in range(100):  # the broker follows the catalog
            if not one.engine.authorize_consumer("halt", app):
                break
            await asyncio.sleep(0.05)
        for m in first:
            a.ack(m.id)  # room again, but the consumer is paused: nothing from memory
        await asyncio.sleep(0.5)
        assert a.deliveries.empty()
        await sync_to_async(pause_consumers)("halt", False)
        rest = await _receive_all(a, 4, within=5)
        assert [m.id for m in rest] == ["h2", "h3", "h4", "h5"]
        assert {m.attempts for m in rest} == {1}


async def test_a_stalled_subscriber_does_not_lease_its_returned_read_ahead_again(
    catalog, redis_url
):
    """A subscriber that acks nothing: its read-ahead goes back after the hold and stays
    back (the queue's backlog is leased by nobody) instead of being leased again and again."""
    async with _subscriber_broker(catalog, redis_url) as (one, a):
        for i in range(10):
            await a.publish("stall", i, message_id=f"s{i}")
        await a.subscribe("stall")
        await a.receive()
        await a.receive()  # its room is 2, never freed
        await asyncio.sleep(READ_AHEAD_HOLD_S + 1.5)  # held, handed back, rounds go by
        stats = await one.engine.queue_stats("stall")
        assert stats.in_flight == 2, stats  # only what it was handed


async def test_a_spent_budget_reads_nothing_ahead(catalog, redis_url):
    """With no read-ahead budget left (here: 0) a consumer leases only its room."""
    budget = ReadAheadBudget(0)
    async with _subscriber_broker(catalog, redis_url, read_ahead=budget) as (one, a):
        for i in range(6):
            await a.publish("lean", i, message_id=f"l{i}")
        await a.subscribe("lean")
        first = [await a.receive(), await a.receive()]
        await asyncio.sleep(0.2)  # a batch would have been read ahead by now
        assert (await one.engine.queue_stats("lean")).in_flight == 2
        for m in first:
            a.ack(m.id)
        rest = await _receive_all(a, 4, within=5)
        assert [m.id for m in [*first, *rest]] == [f"l{i}" for i in range(6)]
        assert (budget.held, budget.peak) == (0, 0)


async def test_read_ahead_keeps_within_the_budget_and_returns_the_rest(catalog, redis_url):
    """What does not fit in the process's budget goes back to the group at once, unread:
    every message is still delivered, as a first attempt, and the budget is never passed."""
    async with _subscriber_broker(catalog, redis_url) as (one, a):
        for i in range(10):
            await a.publish("tight", i, message_id=f"t{i}")
        app = one.engine.catalog.consumers_of("tight")[0].app
        sample = (await one.engine.lease("tight", app, count=1, owner="x")).deliveries
        await one.engine.return_unread("tight", app, sample)
        budget = ReadAheadBudget(2 * footprint(sample))  # room for two kept deliveries
        one.server.ctx.read_ahead = budget
        await a.subscribe("tight")
        got = [await a.receive(), await a.receive()]  # its room is 2
        await asyncio.sleep(0.2)  # what fits is read ahead, the rest went back
        assert budget.held <= budget.limit and budget.refused > 0
        for m in got:
            a.ack(m.id)
        got += await _receive_all(a, 8, within=5)
        assert sorted(m.id for m in got) == sorted(f"t{i}" for i in range(10))
        assert {m.attempts for m in got} == {1}  # back unread: not a delivery
        assert 0 < budget.peak <= budget.limit  # it did read ahead, within the budget


async def test_a_slow_subscriber_reads_ahead_only_what_it_takes_per_hold(catalog, redis_url):
    """A subscriber acking one message per hold keeps about one read ahead, not a batch
    that goes back unread a hold later, each time."""
    async with _subscriber_broker(catalog, redis_url) as (one, a):
        for i in range(40):
            await a.publish("slow", i, message_id=f"s{i}")
        await a.subscribe("slow")
        held = [await a.receive(), await a.receive()]  # its room is 2; a batch read ahead
        seen = {m.id for m in held}
        for _ in range(3):
            await asyncio.sleep(READ_AHEAD_HOLD_S + 0.2)  # the read-ahead went back
            a.ack(held.pop(0).id)
            held.append(await a.receive(5))
            assert held[-1].id not in seen and held[-1].attempts == 1
            seen.add(held[-1].id)
        await asyncio.sleep(0.2)
        stats = await one.engine.queue_stats("slow")
        assert stats.in_flight <= 2 + 3, stats  # its 2, and what it takes per hold
