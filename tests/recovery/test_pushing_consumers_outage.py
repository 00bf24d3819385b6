"""Consumers the broker pushes to — a VibeMQ subscriber, a zbus long poller — drain a
backlog across a 0.3 s Redis outage (kill -9 and restart): delivery goes on within 2 s of
Redis being back, and every stored message arrives (those whose acks the outage lost come
again once their lease lapses). A dispatcher sleeps until something is due, so one whose
lease failed must not wait for the queue's next append."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import AsyncIterator, Callable

import pytest

from brokers.clients.vibemq import VibeMQClient
from brokers.engine import (
    AppInfo,
    BrokerInfo,
    CatalogSnapshot,
    CatalogWatcher,
    ConsumerPolicyInfo,
    Engine,
    Message,
    PartitionGroupInfo,
    ProducerPolicyInfo,
    TopicInfo,
    hash_token,
    publish_snapshot,
)
from brokers.engine.redisio import broker_client
from brokers.servers.vibemq import ServerConfig, start_vibemq_server
from brokers.servers.zbus import ZbusConfig, start_zbus_server
from tests.recovery.redis_server import OwnRedis
from tests.zbus.conftest import Raw, msg

TOKEN = "outage-token"
QUEUE = "backlog"
ANONYMOUS = "team.anonymous"
N = 300


def _snapshot() -> CatalogSnapshot:
    group = (PartitionGroupInfo(group_id=0, leader=1, partitions=(0,)),)
    topic = TopicInfo(
        code=QUEUE, partitions=1, groups=group, zbus_mode=1, team="team", anonymous_app=ANONYMOUS
    )
    apps = {
        "app1": AppInfo(code="app1", team="team", token_hashes=(hash_token(TOKEN),)),
        ANONYMOUS: AppInfo(code=ANONYMOUS, team="team"),
    }
    return CatalogSnapshot(
        version=1,
        brokers={1: BrokerInfo(id=1, host="127.0.0.1", jmq4_port=0, zbus_port=0, vibemq_port=0)},
        topics={QUEUE: topic},
        apps=apps,
        producers=tuple(ProducerPolicyInfo(name=f"{a}.p", topic=QUEUE, app=a) for a in apps),
        consumers=tuple(ConsumerPolicyInfo(name=f"{a}.c", topic=QUEUE, app=a) for a in apps),
    )


class Arrivals:
    """Bodies delivered and when (time.monotonic()) each first came."""

    def __init__(self) -> None:
        self.first: dict[bytes, float] = {}
        self.count = 0

    def add(self, body: bytes) -> None:
        self.count += 1
        self.first.setdefault(body, time.monotonic())


async def _vibemq_consumer(port: int, arrivals: Arrivals) -> None:
    """Subscribes and acks each delivery after a short pause, reconnecting after errors."""
    while True:
        try:
            client = await VibeMQClient.open("127.0.0.1", port, TOKEN)
            try:
                await client.subscribe(QUEUE)
                while True:
                    delivery = await client.receive(30)
                    arrivals.add(delivery.payload.encode())
                    await asyncio.sleep(0.005)
                    client.ack(delivery.id)
            finally:
                await client.close()
        except (OSError, TimeoutError, ConnectionError, RuntimeError):
            await asyncio.sleep(0.05)


async def _zbus_consumer(port: int, arrivals: Arrivals) -> None:
    """Long-polls token-less with window 1 (each consume settles the last delivery), after a
    short pause per message; a consume is sent again after 1 s without an answer."""
    raw = await Raw.open(port)
    try:
        n = 0
        while True:
            n += 1
            await raw.send(msg("cmd: consume", f"mq: {QUEUE}", f"msgid: c{n}", "window: 1"))
            with contextlib.suppress(TimeoutError):
                reply = await raw.recv(1.0)
                if reply.status == 200:
                    arrivals.add(reply.body)
                    await asyncio.sleep(0.005)
                else:
                    await asyncio.sleep(0.05)
    finally:
        await raw.close()


@contextlib.asynccontextmanager
async def _served(
    own_redis: OwnRedis, protocol: str
) -> AsyncIterator[tuple[int, Callable[[int, Arrivals], object]]]:
    client = broker_client(own_redis.url, max_connections=32)
    await publish_snapshot(client, _snapshot())
    watcher = CatalogWatcher(client, resync_interval=0.5)
    await watcher.start()
    engine = Engine(client, lambda: watcher.current, broker_id=1)
    await engine.append_many(QUEUE, "app1", [Message(f"m{i}".encode()) for i in range(N)])
    if protocol == "vibemq":
        config = ServerConfig(ack_timeout_ms=2_000, timer_interval=0.1, shutdown_grace=1.0)
        server = await start_vibemq_server(engine, watcher, "127.0.0.1", 0, 1, config=config)
        consumer = _vibemq_consumer
    else:
        config = dataclasses.replace(ZbusConfig(), lease_ms=2_000, shutdown_grace=1.0)
        server = await start_zbus_server(engine, watcher, "127.0.0.1", 0, 1, config=config)
        consumer = _zbus_consumer
    try:
        yield server.port, consumer
    finally:
        await server.stop()
        await engine.close()
        await watcher.stop()
        await client.aclose()


@pytest.mark.parametrize("protocol", ["vibemq", "zbus"])
async def test_a_pushing_consumer_drains_its_backlog_across_a_redis_outage(own_redis, protocol):
    arrivals = Arrivals()
    async with _served(own_redis, protocol) as (port, consumer):
        task = asyncio.create_task(consumer(port, arrivals))
        try:
            deadline = time.monotonic() + 10
            while len(arrivals.first) < N // 4:  # draining, mid-backlog
                assert time.monotonic() < deadline, f"only {len(arrivals.first)} before"
                await asyncio.sleep(0.01)
            own_redis.kill()
            await asyncio.sleep(0.3)
            await asyncio.to_thread(own_redis.start)
            back = own_redis.back_at
            deadline = back + 20
            while len(arrivals.first) < N:
                assert time.monotonic() < deadline, f"{len(arrivals.first)}/{N} after the outage"
                await asyncio.sleep(0.02)
            resumed = min(t for t in arrivals.first.values() if t > back)
            assert resumed - back < 2.0, f"delivery resumed {resumed - back:.2f} s after Redis"
            assert set(arrivals.first) == {f"m{i}".encode() for i in range(N)}
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
