"""Read-ahead of queue MQs: a batch leased for long-polling sessions is dealt from memory,
goes back to the group unread when nobody takes it in time, and stops at a pause."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest
from asgiref.sync import sync_to_async
from django.db import connection

from brokers.catalog_loader import publish
from brokers.models import ConsumerPolicy
from brokers.servers.readahead import ReadAheadBudget, footprint
from tests.zbus.conftest import TEST_CONFIG, Broker_, Raw, msg

pytestmark = pytest.mark.django_db(transaction=True)

HOLD = dataclasses.replace(TEST_CONFIG, read_ahead_hold=0.3)


async def _produce(raw: Raw, bodies: list[bytes]) -> None:
    for i, body in enumerate(bodies):
        await raw.send(msg("cmd: produce", "mq: orders", f"msgid: p{i}", body=body))
        assert (await raw.recv()).status == 200


async def test_unclaimed_read_ahead_goes_back_unread(catalog, redis_url) -> None:
    """A long poll right after another leases the rest of the backlog; when no session
    takes it within the hold, another server's consumer gets it, not marked redelivered."""
    first, second = Broker_(redis_url), Broker_(redis_url)
    await first.start(HOLD)
    await second.start(HOLD)
    a = await Raw.open(first.port)
    b = await Raw.open(second.port)
    try:
        await _produce(a, [b"m0", b"m1", b"m2", b"m3"])
        for i in range(2):  # the first leases what it wants, the second reads ahead
            await a.send(msg("cmd: consume", "mq: orders", f"msgid: c{i}"))
            assert (await a.recv()).body == b"m%d" % i
        # m2 and m3 wait in the first server's memory
        await b.send(msg("cmd: consume", "mq: orders", "msgid: d1", "window: 2"))
        got = [await b.recv(3.0) for _ in range(2)]
        assert [m.body for m in got] == [b"m2", b"m3"]
        assert all(m.headers.get("redelivered") in (None, "0") for m in got)
    finally:
        for raw in (a, b):
            await raw.close()
        await first.stop()
        await second.stop()


async def test_read_ahead_is_dealt_to_the_next_long_polls_in_order(broker) -> None:
    raw = await Raw.open(broker.port)
    try:
        await _produce(raw, [f"m{i}".encode() for i in range(5)])
        bodies = []
        for i in range(5):
            await raw.send(msg("cmd: consume", "mq: orders", f"msgid: c{i}"))
            bodies.append((await raw.recv()).body)
        assert bodies == [f"m{i}".encode() for i in range(5)]
        await raw.send(msg("cmd: consume", "mq: orders", "msgid: last"))  # settles m4
        assert await raw.silent(0.3)
    finally:
        await raw.close()


def _pause(paused: bool) -> None:
    try:
        ConsumerPolicy.objects.filter(topic__code="orders").update(paused=paused)
        publish()
    finally:
        connection.close()  # this runs on a worker thread: its connection goes with it


async def test_a_pause_holds_back_what_was_read_ahead(broker) -> None:
    raw = await Raw.open(broker.port)
    try:
        await _produce(raw, [b"m0", b"m1", b"m2", b"m3"])
        for i in range(2):  # the second consume reads m2 and m3 ahead
            await raw.send(msg("cmd: consume", "mq: orders", f"msgid: a{i}"))
            assert (await raw.recv()).body == b"m%d" % i
        await sync_to_async(_pause)(True)
        for _ in range(50):  # the broker follows the catalog
            if not broker.engine.authorize_consumer(
                "orders", broker.engine.catalog.consumers_of("orders")[0].app
            ):
                break
            await asyncio.sleep(0.05)
        await raw.send(msg("cmd: consume", "mq: orders", "msgid: c1"))
        assert await raw.silent(0.5)  # m2 was in memory: the pause holds it back too
        await sync_to_async(_pause)(False)
        assert (await raw.recv(3.0)).body == b"m2"
    finally:
        await raw.close()


async def test_read_ahead_taken_to_the_last_leaves_nothing_for_the_hold_timer(
    catalog, redis_url, caplog
) -> None:
    """A consumer that takes everything read ahead leaves no empty queue behind: the hold
    timer used to fail on one (IndexError in the loop's callback), and with it the expiry
    of every other consumer's read-ahead until the next lease."""
    server = Broker_(redis_url)
    await server.start(HOLD)
    raw = await Raw.open(server.port)
    try:
        await _produce(raw, [b"m0", b"m1", b"m2"])
        for i in range(3):  # m1 and m2 come from memory
            await raw.send(msg("cmd: consume", "mq: orders", f"msgid: c{i}"))
            assert (await raw.recv()).body == f"m{i}".encode()
        await asyncio.sleep(HOLD.read_ahead_hold + 0.3)  # the hold timer fires
        assert not [r for r in caplog.records if r.exc_info]
        queue = server.server.ctx.queues["orders"]
        assert queue._ahead == {} and queue._ahead_timer is None
    finally:
        await raw.close()
        await server.stop()


async def _in_flight(server: Broker_) -> int:
    app = server.engine.catalog.consumers_of("orders")[0].app
    return (await server.engine.group_stats("orders", app)).in_flight


async def _in_flight_once_settled(server: Broker_, expected: int) -> int:
    """What is in flight once the acks of earlier consumes reached the engine (they wait
    ``settle_delay`` to go together): ``expected`` as soon as it is, else what is after 2 s."""
    deadline = asyncio.get_running_loop().time() + 2.0
    while (n := await _in_flight(server)) != expected:
        if asyncio.get_running_loop().time() > deadline:
            break
        await asyncio.sleep(0.005)
    return n


async def test_without_budget_a_long_poll_leases_only_what_it_wants(catalog, redis_url) -> None:
    """A process whose read-ahead budget is spent (here: 0) leases one message per long
    poll, not a batch, and keeps nothing in memory."""
    server = Broker_(redis_url)
    budget = ReadAheadBudget(0)
    await server.start(read_ahead=budget)
    raw = await Raw.open(server.port)
    try:
        await _produce(raw, [f"m{i}".encode() for i in range(5)])
        for i in range(5):
            await raw.send(msg("cmd: consume", "mq: orders", f"msgid: c{i}"))
            assert (await raw.recv()).body == f"m{i}".encode()
            assert await _in_flight_once_settled(server, 1) == 1  # a batch would hold five
            assert server.server.ctx.queues["orders"]._ahead == {}
        assert (budget.held, budget.peak, budget.refused) == (0, 0, 0)
    finally:
        await raw.close()
        await server.stop()


async def test_read_ahead_keeps_within_the_budget_and_returns_the_rest(catalog, redis_url) -> None:
    """What does not fit in the budget goes back to the group at once, unread: every
    message still comes in order, none marked redelivered, and the budget is never passed."""
    bodies = [f"m{i}".encode() for i in range(10)]
    server = Broker_(redis_url)
    await server.start()
    raw = await Raw.open(server.port)
    try:
        await _produce(raw, bodies)
        [record] = (
            await server.engine.lease("orders", _app(server), count=1, owner="x")
        ).deliveries
        await server.engine.return_unread("orders", _app(server), [record])
        budget = ReadAheadBudget(2 * footprint([record]))  # room for two kept deliveries
        server.server.ctx.read_ahead = budget
        got = []
        for i in range(10):
            await raw.send(msg("cmd: consume", "mq: orders", f"msgid: c{i}"))
            got.append(await raw.recv(3.0))
            assert budget.held <= budget.limit
            if i == 1:  # m0 came alone (a range handed back); then m2, m3 kept
                [kept] = server.server.ctx.queues["orders"]._ahead.values()
                assert [d.index for d, _ in kept] == [2, 3]
                assert budget.refused == 6  # m4..m9: back in the group
        assert [m.body for m in got] == bodies
        assert all(m.headers.get("redelivered") in (None, "0") for m in got)
        assert budget.peak == budget.limit
    finally:
        await raw.close()
        await server.stop()


def _app(server: Broker_) -> str:
    return server.engine.catalog.consumers_of("orders")[0].app


async def test_a_slow_poller_leases_one_at_a_time_a_fast_one_reads_ahead(
    catalog, redis_url
) -> None:
    """The pump leases by the consumer's pace: one poll per hold leases one message (not a
    batch handed back unread a hold later), polls in quick succession read ahead."""
    server = Broker_(redis_url)
    await server.start(dataclasses.replace(HOLD, settle_gather=1))  # acks go at settle_delay
    raw = await Raw.open(server.port)
    try:
        await _produce(raw, [f"m{i}".encode() for i in range(20)])
        for i in range(3):  # slow: one poll per hold and more
            await raw.send(msg("cmd: consume", "mq: orders", f"msgid: s{i}"))
            assert (await raw.recv()).body == f"m{i}".encode()
            assert await _in_flight(server) <= 2  # this one, and the last until settled
            assert server.server.ctx.queues["orders"]._ahead == {}
            await asyncio.sleep(HOLD.read_ahead_hold + 0.1)
        for i in range(3, 6):  # fast: the second poll reads ahead
            await raw.send(msg("cmd: consume", "mq: orders", f"msgid: f{i}"))
            assert (await raw.recv()).body == f"m{i}".encode()
        assert await _in_flight(server) > 3
    finally:
        await raw.close()
        await server.stop()


async def test_acks_go_together_and_a_stopping_server_sends_those_waiting(
    catalog, redis_url
) -> None:
    """A consume's ack of the previous delivery waits ``settle_delay`` to go to the engine
    with others; a server that stops sends what waits first: what its consumer had
    settled is not delivered again, what it still held is."""
    server = Broker_(redis_url)
    await server.start(dataclasses.replace(TEST_CONFIG, settle_delay=60.0))
    raw = await Raw.open(server.port)
    try:
        await _produce(raw, [b"m0", b"m1", b"m2"])
        for i in range(3):
            await raw.send(msg("cmd: consume", "mq: orders", f"msgid: c{i}"))
            assert (await raw.recv()).body == b"m%d" % i
        assert await _in_flight(server) == 3  # m0 and m1 acked, their acks waiting
    finally:
        await raw.close()
        await server.stop()
    after = Broker_(redis_url)
    await after.start()
    raw = await Raw.open(after.port)
    try:
        assert await _in_flight(after) == 0  # m2 went back when the connection closed
        await raw.send(msg("cmd: consume", "mq: orders", "msgid: d0"))
        again = await raw.recv(3.0)
        assert again.body == b"m2" and again.headers.get("redelivered") == "1"
        await raw.send(msg("cmd: consume", "mq: orders", "msgid: d1"))
        assert await raw.silent(0.3)  # m0 and m1 were acked as the first server stopped
    finally:
        await raw.close()
        await after.stop()


async def test_acks_go_at_once_when_a_batch_of_them_waits(catalog, redis_url) -> None:
    """Acks that reach ``settle_batch`` in one MQ go to the engine without waiting out
    ``settle_delay``; fewer wait for it."""
    server = Broker_(redis_url)
    await server.start(dataclasses.replace(TEST_CONFIG, settle_delay=60.0, settle_batch=2))
    raw = await Raw.open(server.port)
    try:
        await _produce(raw, [b"m0", b"m1", b"m2", b"m3"])
        for i in range(3):  # the third consume acks m1: two acks wait, so both go
            await raw.send(msg("cmd: consume", "mq: orders", f"msgid: c{i}"))
            assert (await raw.recv()).body == b"m%d" % i
        assert await _in_flight_once_settled(server, 1) == 1  # m2
        await raw.send(msg("cmd: consume", "mq: orders", "msgid: c3"))
        assert (await raw.recv()).body == b"m3"
        await asyncio.sleep(0.3)
        assert await _in_flight(server) == 2  # m2's ack waits alone: m2 and m3 in flight
    finally:
        await raw.close()
        await server.stop()


async def test_a_lone_ack_waits_for_company_until_settle_max_delay(catalog, redis_url) -> None:
    """Fewer than ``settle_gather`` acks in one MQ wait past ``settle_delay`` (a MQ polled
    a few times a second would cost a call per ack); once that many wait and the oldest
    waited ``settle_delay`` they go at once; a lone one goes at ``settle_max_delay``."""
    server = Broker_(redis_url)
    config = dataclasses.replace(
        TEST_CONFIG, settle_delay=0.05, settle_gather=3, settle_max_delay=1.0
    )
    await server.start(config, read_ahead=ReadAheadBudget(0))  # one lease per poll
    raw = await Raw.open(server.port)

    async def consume(i: int) -> None:
        await raw.send(msg("cmd: consume", "mq: orders", f"msgid: c{i}"))
        assert (await raw.recv()).body == b"m%d" % i

    try:
        await _produce(raw, [f"m{i}".encode() for i in range(5)])
        await consume(0)
        await consume(1)  # acks m0: alone, it waits past settle_delay
        await asyncio.sleep(0.3)
        assert await _in_flight(server) == 2
        await consume(2)
        await consume(3)  # acks m1 and m2: three wait, the oldest long enough
        assert await _in_flight_once_settled(server, 1) == 1  # m3
        await consume(4)  # acks m3: alone again
        started = asyncio.get_running_loop().time()
        await asyncio.sleep(0.3)
        assert await _in_flight(server) == 2
        assert await _in_flight_once_settled(server, 1) == 1  # m4
        waited = asyncio.get_running_loop().time() - started
        assert 0.6 < waited < 1.8, waited
    finally:
        await raw.close()
        await server.stop()


async def test_a_long_pollers_consumes_ask_the_gate_once_per_catalog(broker, monkeypatch) -> None:
    """What a connection's consume resolved — its queue, acting app and the engine gate's
    answer — is kept while the catalog snapshot and the request stay the same: a long
    poller does not ask the gate again for every message (a catalog change does: the
    pause test above)."""
    asked: list[tuple] = []
    gate = broker.engine.authorize_consumer

    def counted(*args, **kwargs):
        asked.append(args)
        return gate(*args, **kwargs)

    monkeypatch.setattr(broker.engine, "authorize_consumer", counted)
    raw = await Raw.open(broker.port)
    try:
        await _produce(raw, [f"m{i}".encode() for i in range(6)])
        for i in range(6):  # the first leases, the rest come from memory
            await raw.send(msg("cmd: consume", "mq: orders", f"msgid: c{i}"))
            assert (await raw.recv()).body == f"m{i}".encode()
        assert len(asked) <= 2, asked
    finally:
        await raw.close()
