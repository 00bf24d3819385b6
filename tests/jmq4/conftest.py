"""JMQ4 fixtures: a catalog in PostgreSQL published to Redis, in-process JMQ4 servers for
brokers 1 and 2 on free loopback ports, and raw-socket helpers."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
import redis
import redis.asyncio as aioredis

from brokers.catalog_loader import publish
from brokers.engine import CatalogWatcher, Engine
from brokers.models import Broker, ConsumerPolicy, PartitionGroup, ProducerPolicy, Team
from brokers.servers.jmq4 import ServerConfig, start_jmq4_server
from tests import factories
from tests.scripts_path import free_port


@dataclass
class Catalog:
    """What the catalog fixture created."""

    ports: dict[int, int]
    token: str
    other_token: str
    paused_token: str
    blocked_token: str
    admin_token: str


def _policies(topic, app, **consumer) -> None:
    ProducerPolicy.objects.create(topic=topic, app=app, blacklist=consumer.pop("pblack", []))
    ConsumerPolicy.objects.create(topic=topic, app=app, **consumer)


def build_catalog(redis_url: str) -> Catalog:
    """Two brokers; ``orders`` (4 partitions: group 0 on broker 1, group 1 on broker 2),
    ``local`` (2 partitions on broker 1) and ``remote`` (2 partitions on broker 2)."""
    redis.Redis.from_url(redis_url).flushall()
    team = Team.objects.create(name="team1")
    cluster = factories.cluster_with_brokers(brokers=2)
    ports = {1: free_port(), 2: free_port()}
    for bid, port in ports.items():
        # runbroker (test_two_brokers) binds every protocol port of its row: all free ones
        Broker.objects.filter(id=bid).update(
            jmq4_port=port, zbus_port=free_port(), vibemq_port=free_port()
        )
    orders = factories.topic("orders", cluster, team, partitions=4, groups=2)
    PartitionGroup.objects.filter(topic=orders, group_id=0).update(
        leader_id=1, preferred_leader_id=1
    )
    PartitionGroup.objects.filter(topic=orders, group_id=1).update(
        leader_id=2, preferred_leader_id=2
    )
    local = factories.topic("local", cluster, team, partitions=2, groups=1)
    PartitionGroup.objects.filter(topic=local).update(leader_id=1, preferred_leader_id=1)
    remote = factories.topic("remote", cluster, team, partitions=2, groups=1)
    PartitionGroup.objects.filter(topic=remote).update(leader_id=2, preferred_leader_id=2)
    app, token = factories.app("app1", team)
    for t in (orders, local, remote):
        _policies(t, app, ack_timeout_ms=30_000, batch_size=10)
    _, other_token = factories.app("other", team)
    paused, paused_token = factories.app("paused", team)
    _policies(local, paused, paused=True)
    blocked, blocked_token = factories.app("blocked", team)
    _policies(local, blocked, blacklist=["127.0.0.0/8"], pblack=["127.0.0.1"])
    admin, admin_token = factories.app("root", team)
    admin.is_admin = True
    admin.save()
    publish()
    return Catalog(ports, token, other_token, paused_token, blocked_token, admin_token)


@pytest.fixture
def catalog(db, redis_url: str) -> Catalog:
    """The test catalog, published to the session's (flushed) Redis."""
    return build_catalog(redis_url)


class Broker_:
    """An in-process broker: engine + watcher + JMQ4 server."""

    def __init__(self, broker_id: int, port: int, redis_url: str) -> None:
        self.broker_id, self.port, self.redis_url = broker_id, port, redis_url

    async def start(self, config: ServerConfig | None = None) -> None:
        self.redis = aioredis.from_url(self.redis_url)
        self.watcher = CatalogWatcher(self.redis, resync_interval=0.5)
        await self.watcher.start()
        self.engine = Engine(self.redis, lambda: self.watcher.current, broker_id=self.broker_id)
        self.server = await start_jmq4_server(
            self.engine, self.watcher, "127.0.0.1", self.port, self.broker_id, config=config
        )

    async def stop(self) -> None:
        await self.server.stop(grace=1.0)
        await self.engine.close()
        await self.watcher.stop()
        await self.redis.aclose()


@pytest.fixture
async def brokers(catalog: Catalog, redis_url: str) -> AsyncIterator[dict[int, Broker_]]:
    """JMQ4 servers for brokers 1 and 2 on the catalog's ports."""
    started = {bid: Broker_(bid, port, redis_url) for bid, port in catalog.ports.items()}
    for b in started.values():
        await b.start(ServerConfig(max_inflight=16))
    try:
        yield started
    finally:
        for b in started.values():
            await b.stop()
