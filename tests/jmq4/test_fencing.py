"""A broker whose catalog is stale (it was paused while failover moved its partitions)
has its JMQ4 produces refused inside the append script, before it learns of the change
(issue 20 item 9, the fence): 188 to the client and nothing stored."""

from __future__ import annotations

import msgspec
import pytest
import redis

from brokers.catalog_loader import publish, record_leaders
from brokers.engine import CatalogSnapshot
from brokers.engine.keys import PartitionKeys
from brokers.models import PartitionGroup
from brokers.protocols.jmq4 import Code
from tests.jmq4.raw import RawClient
from tests.jmq4.test_messaging import produce_request

pytestmark = pytest.mark.django_db


def _moved(snapshot: CatalogSnapshot, topic: str, leader: int) -> CatalogSnapshot:
    """``snapshot`` with every group of ``topic`` led by ``leader``, one version later."""
    info = snapshot.topics[topic]
    groups = tuple(msgspec.structs.replace(g, leader=leader) for g in info.groups)
    topics = {**snapshot.topics, topic: msgspec.structs.replace(info, groups=groups)}
    return snapshot.replace(topics=topics, version=snapshot.version + 1)


async def _produce(port: int, token: str, partition: int, body: bytes) -> int:
    raw = await RawClient.open(port)
    try:
        await raw.login("app1", token)
        reply = await raw.call(produce_request("local", partition, body), request_id=2)
        return reply.payload.topics[0].code
    finally:
        await raw.close()


async def test_a_stale_leader_is_refused_by_redis_and_stores_nothing(catalog, brokers, redis_url):
    port = catalog.ports[1]
    assert await _produce(port, catalog.token, 0, b"while leader") == Code.SUCCESS
    stale = brokers[1]
    await stale.watcher.stop()  # paused: it keeps the snapshot naming it leader of `local`
    before = await stale.engine.progress("local", "app1", partitions=[0, 1])
    client = redis.Redis.from_url(redis_url)
    try:
        moved = _moved(stale.watcher.current, "local", 2)
        record_leaders(client, moved.topics.values(), moved.version)  # failover's publish
    finally:
        client.close()
    assert stale.watcher.current.topics["local"].leader_of(0) == 1  # it still believes
    assert await _produce(port, catalog.token, 0, b"after failover") == (
        Code.FW_PRODUCE_MESSAGE_BROKER_NOT_LEADER
    )
    assert await _produce(port, catalog.token, -1, b"any partition") == (
        Code.FW_PRODUCE_MESSAGE_BROKER_NOT_LEADER
    )
    after = await stale.engine.progress("local", "app1", partitions=[0, 1])
    assert [p.max_index for p in after] == [p.max_index for p in before]


def test_publish_records_leaders_and_an_older_version_never_overwrites(catalog, redis_url):
    client = redis.Redis.from_url(redis_url)
    try:
        meta = PartitionKeys("local", 0).meta
        assert client.hget(meta, "ldr") == b"1"
        old = publish()
        PartitionGroup.objects.filter(topic__code="local").update(leader_id=2)
        new = publish()
        # recorded at the snapshot's own version (its checkpoint, publish()'s, is the next)
        assert client.hmget(meta, "ldr", "lv") == [b"2", str(new.version - 1).encode()]
        record_leaders(client, old.topics.values(), old.version)  # an older publish, late
        assert client.hget(meta, "ldr") == b"2"
    finally:
        client.close()
