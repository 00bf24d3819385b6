"""What a zbus server keeps per MQ and per connection goes when they do: a fleet of clients
that connect, consume and leave, over MQs that come and go, must not grow the broker."""

from __future__ import annotations

import gc
import weakref

import pytest
from asgiref.sync import sync_to_async
from django.db import connection

from bench import zbus_load
from brokers.catalog_loader import publish
from brokers.engine.keys import mailbox_key
from brokers.models import Topic
from brokers.servers.zbus import queue as queue_module
from brokers.servers.zbus.relay import TEMP_MQS
from tests.access.conftest import until
from tests.zbus.conftest import Broker_, Raw, msg

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def short_pump_idle(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pumps with nobody waiting end after 0.1 s instead of 1 s."""
    monkeypatch.setattr(queue_module, "PUMP_IDLE", 0.1)


async def test_connections_that_left_are_forgotten(broker: Broker_) -> None:
    ctx = broker.server.ctx
    for i in range(20):
        raw = await Raw.open(broker.port)
        await raw.send(msg("cmd: consume", "mq: orders", f"msgid: c{i}"))
        await raw.send(msg("cmd: consume", "mq: news", f"msgid: n{i}", "topic: *"))
        await until(lambda: len(ctx.activity.get("news", {})) == 1)
        await raw.close()
        await until(lambda: not ctx.activity)  # no closed connection counted or kept
    await until(lambda: "orders" not in ctx.queues and "news" not in ctx.pubsubs)


async def test_a_queue_that_left_hands_its_in_flight_message_to_the_next(
    broker: Broker_, raw: Raw
) -> None:
    ctx = broker.server.ctx
    await raw.send(msg("cmd: produce", "mq: orders", "msgid: p1", body=b"one"))
    assert (await raw.recv()).status == 200
    first = await Raw.open(broker.port)
    await first.send(msg("cmd: consume", "mq: orders", "msgid: c1"))
    assert (await first.recv()).body == b"one"  # in flight, never acked
    queue = ctx.queues["orders"]
    await first.close()
    await until(lambda: "orders" not in ctx.queues)
    assert queue.retired
    await raw.send(msg("cmd: consume", "mq: orders", "msgid: c2"))
    again = await raw.recv()
    assert (again.body, again.headers.get("redelivered")) == (b"one", "1")
    assert ctx.queues["orders"] is not queue
    await raw.send(msg("cmd: produce", "mq: orders", "msgid: p2", body=b"two"))
    assert (await raw.recv()).status == 200
    await raw.send(msg("cmd: consume", "mq: orders", "msgid: c3"))
    assert (await raw.recv()).body == b"two"


async def test_a_consumer_keeps_its_queue_and_finds_what_came_while_no_pump_ran(
    broker: Broker_, raw: Raw
) -> None:
    """A connection that consumed stays a consumer while open (its runtime stays); a
    message appended after its pump ended — announced to nobody — reaches its next
    consume at once, though its last lease had found the MQ empty."""
    ctx = broker.server.ctx
    await raw.send(msg("cmd: consume", "mq: orders", "msgid: c1"))
    await until(lambda: "orders" in ctx.queues)
    queue = ctx.queues["orders"]
    producer = await Raw.open(broker.port)
    await producer.send(msg("cmd: produce", "mq: orders", "msgid: p1", body=b"x"))
    assert (await producer.recv()).status == 200
    assert (await raw.recv()).body == b"x"
    await until(lambda: queue._task is not None and queue._task.done())  # nobody parked
    assert ctx.queues.get("orders") is queue and not queue.retired
    await producer.send(msg("cmd: produce", "mq: orders", "msgid: p2", body=b"y"))
    assert (await producer.recv()).status == 200
    await raw.send(msg("cmd: consume", "mq: orders", "msgid: c2"))
    assert (await raw.recv(wait=2.0)).body == b"y"
    await producer.close()


async def test_a_pubsub_mq_that_left_delivers_to_its_next_subscriber(broker: Broker_) -> None:
    ctx = broker.server.ctx
    first = await Raw.open(broker.port)
    await first.send(msg("cmd: consume", "mq: news", "msgid: a", "topic: *", "window: -1"))
    await until(lambda: "news" in ctx.pubsubs and ctx.pubsubs["news"].subscribers)
    runtime = ctx.pubsubs["news"]
    await first.close()
    await until(lambda: "news" not in ctx.pubsubs)
    await until(lambda: runtime._task is None or runtime._task.done())
    second = await Raw.open(broker.port)
    await second.send(msg("cmd: consume", "mq: news", "msgid: b", "topic: *", "window: -1"))
    await until(lambda: "news" in ctx.pubsubs and ctx.pubsubs["news"].subscribers)
    producer = await Raw.open(broker.port)
    await producer.send(msg("cmd: produce", "mq: news", "msgid: p1", "topic: t", body=b"hi"))
    assert (await producer.recv()).status == 200
    got = await second.recv()
    assert (got.body, got.msgid) == (b"hi", "b")
    await producer.close()
    await second.close()
    await until(lambda: "news" not in ctx.pubsubs)


async def test_an_idle_consumer_does_not_keep_old_catalogs_alive(broker: Broker_, raw: Raw) -> None:
    """A connection remembers what its last consume's catalog decided; a newer catalog
    must not leave the old one alive for as long as the connection stays idle (a fleet
    of streaming consumers, each holding the catalog of the day it connected)."""
    await raw.send(msg("cmd: consume", "mq: orders", "msgid: c1", "window: -1"))
    await until(lambda: "orders" in broker.server.ctx.queues)
    old = weakref.ref(broker.watcher.current)
    await sync_to_async(_publish_change)()
    await until(lambda: broker.watcher.current is not old())
    gc.collect()
    assert old() is None
    producer = await Raw.open(broker.port)  # and the consumer still gets what comes
    await producer.send(msg("cmd: produce", "mq: orders", "msgid: p1", body=b"x"))
    assert (await producer.recv()).status == 200
    assert (await raw.recv()).body == b"x"
    await producer.close()


def _publish_change() -> None:
    try:
        Topic.objects.filter(code="svc").update(max_queue_size=999)
        publish()
    finally:
        connection.close()  # this runs on a worker thread: its connection goes with it


async def test_a_closed_connection_is_freed_without_a_collection(broker: Broker_) -> None:
    """What a closed connection held (its protocol, buffers, consume cache with its MQ
    runtime) is freed as the close is handled, not at a full collection of the cyclic
    garbage — rare with the broker's raised GC thresholds (brokers.servers.runtime): a
    connection that referred back to its protocol made a cycle, and thousands of
    reconnecting clients grew the broker by tens of megabytes between collections."""
    ctx = broker.server.ctx
    gc.collect()
    gc.disable()
    try:
        raw = await Raw.open(broker.port)
        await raw.send(msg("cmd: consume", "mq: orders", "msgid: c1"))
        await until(lambda: len(broker.server._connections) == 1 and "orders" in ctx.queues)
        (proto,) = broker.server._connections
        protocol, connection = weakref.ref(proto), weakref.ref(proto.conn)
        queue = weakref.ref(ctx.queues["orders"])
        del proto
        await raw.close()
        await until(lambda: protocol() is None and connection() is None and queue() is None)
    finally:
        gc.enable()


async def test_rpc_callers_and_workers_that_left_leave_nothing(broker: Broker_) -> None:
    """Callers come and go with a reply queue each, workers with a streaming consume of
    the service: after each round every reply queue (here and in the registry), every
    connection, the service's runtime and every task they started are gone — a broker
    serving short-lived RPC clients all day must stay the size it started."""
    ctx, server = broker.server.ctx, broker.server
    baseline = len(ctx.background)
    for _ in range(3):
        called = await zbus_load.rpc(broker.port, "svc", 0.3, callers=3, workers=2)
        assert called.count > 0
        assert called.lost == 0
        await until(
            lambda: (
                not ctx.temps
                and not ctx.activity
                and "svc" not in ctx.queues
                and not server._connections
                and len(ctx.background) <= baseline
            ),
            what=lambda: (ctx.temps, ctx.activity, ctx.queues, server._connections, ctx.background),
        )
        left = [key async for key in broker.redis.scan_iter(mailbox_key(TEMP_MQS, "*"))]
        assert left == []
