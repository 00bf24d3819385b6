"""Trace by the id each protocol's client saw, through the real servers and clients: JMQ4's
(partition, index) and businessId, HTTP-MQ's msgId and keys, VibeMQ's message id, zbus's
msgid — in the live store and in the archive."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import httpx
import pytest
import redis.asyncio as aioredis

from brokers.catalog_loader import publish
from brokers.clients.jmq4 import Jmq4Client, OutgoingMessage
from brokers.clients.vibemq import VibeMQClient
from brokers.clients.zbus import ZbusClient
from brokers.engine import DELAY_ID, CatalogWatcher, Engine
from brokers.models import Broker, PartitionGroup, ProducerPolicy, Team
from brokers.servers.jmq4 import start_jmq4_server
from brokers.servers.vibemq import start_vibemq_server
from brokers.servers.vibemq.messages import ID_PROPERTY as VIBEMQ_ID
from brokers.servers.zbus import start_zbus_server
from pipeline import jobs
from pipeline.ids import ID_PROPERTIES, matches, parse
from proxy.httpmq.app import HttpMqApp
from proxy.httpmq.config import ProxyConfig
from tests import factories
from tests.scripts_path import free_port

pytestmark = pytest.mark.django_db
TOPIC = "traced"


@dataclass
class World:
    redis_url: str
    app: str
    token: str
    jmq4_port: int


@pytest.fixture
def world(redis_url, settings) -> World:
    """Topic ``traced`` (2 partitions led by broker 1, archived), app ``tracer`` producing
    to it over every protocol; the catalog published to the flushed Redis."""
    import redis

    settings.REDIS_URL = redis_url
    redis.Redis.from_url(redis_url).flushall()
    team = Team.objects.create(name="tracers")
    cluster = factories.cluster_with_brokers("traced-cluster")
    port = free_port()
    Broker.objects.filter(id=1).update(jmq4_port=port)
    topic = factories.topic(TOPIC, cluster, team, partitions=2, groups=1)
    PartitionGroup.objects.filter(topic=topic).update(leader_id=1)
    app, token = factories.app("tracer", team)
    ProducerPolicy.objects.create(topic=topic, app=app, http_enabled=True, archive=True)
    publish()
    return World(redis_url, app.code, token, port)


async def serve(world: World, produce):
    """Run the JMQ4, zbus and VibeMQ servers of broker 1 around ``await produce(ports)``."""
    client = aioredis.from_url(world.redis_url)
    watcher = CatalogWatcher(client, resync_interval=0.5)
    await watcher.start()
    engine = Engine(client, lambda: watcher.current, broker_id=1)
    servers = [
        await start_jmq4_server(engine, watcher, "127.0.0.1", world.jmq4_port, 1),
        await start_zbus_server(engine, watcher, "127.0.0.1", 0, 1),
        await start_vibemq_server(engine, watcher, "127.0.0.1", 0, 1),
    ]
    try:
        return await produce({"jmq4": world.jmq4_port, "zbus": servers[1].port,
                              "vibemq": servers[2].port})  # fmt: skip
    finally:
        for server in servers:
            await server.stop(grace=0.5)
        await engine.close()
        await watcher.stop()
        await client.aclose()


async def over_jmq4(world: World, port: int) -> dict[str, bytes]:
    async with Jmq4Client("127.0.0.1", port, app=world.app, token=world.token) as c:
        (item,) = await c.produce(
            TOPIC, [OutgoingMessage(b"from jmq4", business_id="order-42")], partition=1
        )
    return {f"{item.partition}:{item.index}": b"from jmq4", "order-42": b"from jmq4"}


async def httpmq_produce(world: World, **fields: str) -> dict:
    """A produce through the HTTP-MQ service's ASGI application (``runproxy`` serves it);
    its send result."""
    app = HttpMqApp(ProxyConfig(redis_url=world.redis_url))
    await app.startup()
    try:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://mq") as web:
            reply = await web.post(
                "/mq/produce",
                data={"producer": f"{world.app}.{TOPIC}", **fields},
                headers={"Authorization": f"Bearer {world.token}"},
            )
    finally:
        await app.shutdown()
    return reply.json()["result"]


async def over_httpmq(world: World) -> dict[str, bytes]:
    result = await httpmq_produce(world, message="from http", keys="k-7")
    return {result["msgId"]: b"from http", result["offsetMsgId"]: b"from http",
            "k-7": b"from http"}  # fmt: skip


async def over_httpmq_delayed(world: World) -> dict[str, bytes]:
    """A timer message produced through the HTTP-MQ service, due at once, then released
    by the engine as the beat task does: its ``msgId`` was given before it had a position."""
    result = await httpmq_produce(world, message="held", deliveryTimestamp="1")
    client = aioredis.from_url(world.redis_url)
    watcher = CatalogWatcher(client)
    await watcher.start()
    engine = Engine(client, lambda: watcher.current)
    try:
        assert await engine.release_delayed(TOPIC) == 1
    finally:
        await engine.close()
        await watcher.stop()
        await client.aclose()
    return {result["msgId"]: b"held"}


async def over_vibemq(world: World, port: int) -> dict[str, bytes]:
    client = await VibeMQClient.open("127.0.0.1", port, world.token)
    try:
        ack = await client.publish(TOPIC, "from vibemq", message_id="vibe-msg-9")
    finally:
        await client.close()
    return {ack.headers["messageId"]: b"from vibemq"}  # a string payload: stored as its text


async def over_zbus(world: World, port: int) -> dict[str, bytes]:
    async with ZbusClient("127.0.0.1", port) as client:
        reply = await client.produce(TOPIC, b"from zbus", token=world.token)
    return {reply.headers["msgid"]: b"from zbus"}


def traced(spark, ids: dict[str, bytes]) -> dict[str, list]:
    return {
        mid: [(r["body"], r["in_archive"], r["in_live"]) for r in jobs.find_messages(TOPIC, mid, spark=spark)]
        for mid in ids
    }  # fmt: skip


def test_each_client_id_finds_its_message_live_and_archived(spark, world, archive_dir):
    async def produce(ports):
        return {
            **await over_jmq4(world, ports["jmq4"]),
            **await over_httpmq(world),
            **await over_vibemq(world, ports["vibemq"]),
        }

    ids = asyncio.run(serve(world, produce))
    assert len(ids) == 6  # JMQ4 position and businessId; msgId, offsetMsgId, keys; VibeMQ id
    live = traced(spark, ids)
    assert live == {mid: [(body, False, True)] for mid, body in ids.items()}
    jobs.archive(once=True, spark=spark)
    both = traced(spark, ids)
    assert both == {mid: [(body, True, True)] for mid, body in ids.items()}
    assert traced(spark, {"nobody-saw-this": b""}) == {"nobody-saw-this": []}


def test_zbus_msgid_finds_its_message(spark, world, archive_dir):
    """Every zbus header is a property of the record, the producer's ``msgid`` included
    (brokers/servers/zbus/stored.py), which the trace reads."""
    ids = asyncio.run(serve(world, lambda ports: over_zbus(world, ports["zbus"])))
    assert traced(spark, ids) == {mid: [(body, False, True)] for mid, body in ids.items()}
    jobs.archive(once=True, spark=spark)
    assert traced(spark, ids) == {mid: [(body, True, True)] for mid, body in ids.items()}


def test_delayed_msgid_finds_its_message(spark, world, archive_dir):
    """A delayed message's ``msgId`` names its delay id, which the released record keeps
    as a property (it named no message before)."""
    ids = asyncio.run(over_httpmq_delayed(world))
    assert traced(spark, ids) == {mid: [(body, False, True)] for mid, body in ids.items()}
    jobs.archive(once=True, spark=spark)
    assert traced(spark, ids) == {mid: [(body, True, True)] for mid, body in ids.items()}


def test_id_forms():
    """What the trace understands of an id, without Spark."""
    assert VIBEMQ_ID.lower() in ID_PROPERTIES  # VibeMQ's id property is an id
    assert "msgid" in ID_PROPERTIES  # zbus's, as a property
    assert parse(TOPIC, " 1:42 ").positions == ((1, 42),)
    assert parse(TOPIC, "order-42").positions == ()
    from proxy.httpmq.messages import delayed_message_id, message_id, offset_message_id

    assert parse(TOPIC, message_id(TOPIC, 1, 7)).positions == ((1, 7),)
    assert parse(TOPIC, offset_message_id(1, 7, 123456)).positions == ((1, 7),)
    delayed = parse(TOPIC, delayed_message_id(TOPIC, 12))
    assert delayed.positions == () and delayed.delay_id == 12 and delayed.partitions is None
    assert matches(delayed, 0, [5], [], {DELAY_ID: "12"})
    assert not matches(delayed, 0, [12], [], {DELAY_ID: "13"})
    with pytest.raises(ValueError):
        parse(TOPIC, "  ")
