"""Reconnects, two broker processes sharing a queue, restarts and graceful shutdown (§5, §7)."""

from __future__ import annotations

import asyncio

import pytest

from brokers.clients.vibemq import VibeMQClient
from tests.vibemq.conftest import Broker, frame


async def test_disconnect_returns_unacked_to_the_queue_head(clients):
    pub = await clients()
    for i in range(3):
        await pub.publish("work", i, message_id=f"w{i}")
    first = await clients()
    await first.subscribe("work")
    got = [await first.receive() for _ in range(3)]
    first.ack(got[0].id)
    await first.close()  # w1, w2 unacked: back at once, not a failed attempt
    second = await clients()
    await second.subscribe("work")
    again = [await second.receive() for _ in range(2)]
    assert [m.id for m in again] == ["w1", "w2"]
    assert [m.attempts for m in again] == [2, 2]  # §7: up by one on each redelivery


async def test_crashed_subscriber_messages_come_back_after_the_ack_timeout(clients):
    pub = await clients()
    await pub.publish("crash", "x", message_id="c")
    victim = await clients()
    await victim.subscribe("crash")
    await victim.receive()
    victim.abort()  # no disconnect frame; the connection just drops
    back = await clients()
    await back.subscribe("crash")
    m = await back.receive(5)
    assert m.id == "c"


async def test_two_brokers_share_a_queue(broker, broker2, catalog):
    one = await VibeMQClient.open("127.0.0.1", broker.port, catalog.token)
    two = await VibeMQClient.open("127.0.0.1", broker2.port, catalog.token)
    try:
        await one.create_queue("shared")
        await broker2.watcher.refresh()
        await two.subscribe("shared")
        for i in range(20):
            await one.publish("shared", i)
        got = []
        for _ in range(20):
            m = await two.receive()
            got.append(m.payload)
            two.ack(m.id)
        assert got == list(range(20))
        # a subscriber moving to the other broker gets its unacked messages
        await one.publish("shared", "moving", message_id="mv")
        assert (await two.receive()).id == "mv"
        await two.close()
        await one.subscribe("shared")
        assert (await one.receive()).id == "mv"
        info = await one.queue_info("shared")
        assert info["subscriberCount"] == 1
        # fan-out reaches subscribers of both processes
        await one.create_queue("bcast", deliveryMode="FanOutWithAck")
        await broker2.watcher.refresh()
        two = await VibeMQClient.open("127.0.0.1", broker2.port, catalog.token)
        await two.subscribe("bcast")
        await one.subscribe("bcast")
        await one.publish("bcast", "hello", message_id="b1")
        assert (await one.receive()).id == "b1"
        assert (await two.receive()).id == "b1"
    finally:
        await one.close()
        await two.close()


async def test_broker_restart_loses_nothing(catalog, redis_url):
    b = Broker(1, redis_url)
    await b.start()
    c = await VibeMQClient.open("127.0.0.1", b.port, catalog.token)
    for i in range(5):
        await c.publish("durable", i)
    await c.subscribe("durable")
    first = await c.receive()
    c.ack(first.id)
    await c.receive()  # delivered, never acked
    stop = asyncio.create_task(b.stop(grace=0.3))
    await asyncio.wait_for(c.closed.wait(), 5)
    assert c.server_disconnect is not None
    assert c.server_disconnect.headers == {"reason": "server_shutdown"}
    await stop
    port = b.port
    b2 = Broker(1, redis_url)
    await b2.start(port=port)
    try:
        c2 = await VibeMQClient.open("127.0.0.1", port, catalog.token)
        await c2.subscribe("durable")
        got = []
        for _ in range(4):
            m = await c2.receive()
            got.append(m.payload)
            c2.ack(m.id)
        assert got == [1, 2, 3, 4]
        await c2.close()
    finally:
        await b2.stop()


async def test_graceful_stop_waits_for_acks(catalog, redis_url):
    b = Broker(1, redis_url)
    await b.start()
    c = await VibeMQClient.open("127.0.0.1", b.port, catalog.token)
    await c.publish("grace", "x", message_id="g")
    await c.subscribe("grace")
    await c.receive()
    stop = asyncio.create_task(b.stop(grace=5.0))
    for _ in range(50):
        if c.server_disconnect is not None:
            break
        await asyncio.sleep(0.02)
    assert c.server_disconnect is not None and not stop.done()
    c.ack("g")  # the in-flight delivery settles: the stop completes well before 5 s
    await asyncio.wait_for(stop, 3)
    check = Broker(1, redis_url)
    await check.start()
    try:
        stats = await check.engine.queue_stats("grace")
        assert (stats.ready, stats.in_flight) == (0, 0)
    finally:
        await check.stop()
    with pytest.raises(Exception):  # noqa: B017 - the old connection is gone
        await c.ping()


async def test_acks_written_just_before_a_close_still_count(clients, raw, catalog, broker):
    """The acks of a client that acks its last deliveries and closes at once were read
    before the close: they settle, nothing is delivered again."""
    pub = await clients()
    for i in range(50):
        await pub.publish("lastacks", i, message_id=f"a{i}")
    sub = await raw()
    sub.send({"id": "c", "type": "connect", "headers": {"authToken": catalog.token}})
    assert (await sub.recv())["type"] == "connectAck"
    sub.send({"id": "s", "type": "subscribe", "queue": "lastacks"})
    ids = []
    while len(ids) < 50:
        got = await sub.recv()
        if got["type"] == "deliver":
            ids.append(got["id"])
    sub.send(
        b"".join(
            frame({"id": f"k{i}", "type": "ack", "headers": {"messageId": m}})
            for i, m in enumerate(ids)
        )
    )
    await sub.close()  # right after the write: most acks are still unprocessed
    for _ in range(50):
        if (await broker.engine.queue_stats("lastacks")).backlog == 0:
            break
        await asyncio.sleep(0.05)
    assert (await broker.engine.queue_stats("lastacks")).backlog == 0
    late = await clients()
    await late.subscribe("lastacks")
    with pytest.raises(asyncio.TimeoutError):
        await late.receive(0.5)


async def test_a_message_goes_to_a_subscriber_of_the_process_it_was_published_on(
    broker, broker2, catalog
):
    """Subscribers of one queue on two processes, both idle: what is published on the
    first is claimed by its subscriber (brokers.engine.notify, claims), so the second
    process's dispatcher is not woken to race for it; what the first cannot take (its
    subscriber gone) reaches the second."""
    one = await VibeMQClient.open("127.0.0.1", broker.port, catalog.token)
    two = await VibeMQClient.open("127.0.0.1", broker2.port, catalog.token)
    pub = await VibeMQClient.open("127.0.0.1", broker.port, catalog.token)
    try:
        await one.create_queue("near")
        await broker2.watcher.refresh()
        await one.subscribe("near")
        await two.subscribe("near")
        await asyncio.sleep(0.2)  # both dispatchers parked
        elsewhere = 0
        for i in range(10):
            await pub.publish("near", i, message_id=f"n{i}")
            try:
                m = await one.receive(1.0)
                one.ack(m.id)
            except TimeoutError:  # taken on the other process (a claim not honoured in time)
                m = await two.receive()
                two.ack(m.id)
                elsewhere += 1
            assert m.id == f"n{i}"
        assert elsewhere <= 2  # woken at once, the other dispatcher raced for each
        await one.close()
        await asyncio.sleep(0.2)
        await pub.publish("near", "last", message_id="last")
        m = await two.receive(1.0)
        assert m.id == "last"
    finally:
        for c in (one, two, pub):
            await c.close()
