"""The catalog snapshot: what the loader builds, and how fast a change reaches a watcher."""

from __future__ import annotations

import asyncio
import time

import pytest
from asgiref.sync import sync_to_async
from django.db import connection, transaction

from brokers.catalog_loader import build_snapshot, current_snapshot, publish
from brokers.engine import TopicInfo
from brokers.engine.catalog import (
    SNAPSHOT_VERSION_KEY,
    VERSION_KEY,
    CatalogSnapshot,
    CatalogWatcher,
    publish_snapshot,
)
from brokers.models import Broker, ConsumerPolicy, ProducerPolicy, Team
from tests import factories


@pytest.fixture
def demo(db):
    team = Team.objects.create(name="red")
    cluster = factories.cluster_with_brokers()
    topic = factories.topic("orders", cluster, team, partitions=4, groups=2)
    app, token = factories.app("shop", team)
    ProducerPolicy.objects.create(topic=topic, app=app, weights={"1": 10, "2": 5}, archive=True)
    ConsumerPolicy.objects.create(
        topic=topic, app=app, paused=True, blacklist=["10.1.0.0/16"], http_enabled=True
    )
    return {"topic": topic, "app": app, "token": token}


def test_snapshot_carries_the_catalog(demo):
    snap = build_snapshot(7)
    assert snap.version == 7
    assert set(snap.brokers) == {1, 2}
    assert snap.brokers[1].permission == 3
    orders = snap.topics["orders"]
    assert orders.partitions == 4
    assert [g.partitions for g in orders.groups] == [(0, 1), (2, 3)]
    assert orders.leader_of(3) == orders.groups[1].leader
    assert orders.archive is True
    producer = snap.producer("orders", "shop")
    assert producer is not None and producer.weights == {1: 10, 2: 5}
    consumer = snap.consumer_named("shop.orders")
    assert consumer is not None and consumer.paused and consumer.http_enabled
    assert consumer.blacklist == ("10.1.0.0/16",)
    assert snap.apps["shop"].check_token(demo["token"])
    assert not snap.apps["shop"].check_token("wrong")
    assert not snap.apps["shop"].check_token(None)
    assert CatalogSnapshot.decode(snap.encode()) == snap


def test_older_snapshot_never_overwrites_newer(redis_url):
    async def scenario() -> tuple[int, int, int, CatalogSnapshot]:
        import redis.asyncio as aioredis

        client = aioredis.from_url(redis_url)
        await client.flushall()
        newer = CatalogSnapshot(version=5, topics=[TopicInfo(code="new")])
        assert await publish_snapshot(client, newer) == 6  # its checkpoint follows it
        refused = await publish_snapshot(client, CatalogSnapshot(version=3))
        stored = int(await client.get(SNAPSHOT_VERSION_KEY))
        watcher = CatalogWatcher(client)
        await watcher.start()
        current = watcher.current
        await watcher.stop()
        await client.aclose()
        return refused, stored, current.version, current

    refused, stored, version, current = asyncio.run(scenario())
    assert (refused, stored, version) == (0, 5, 6)
    assert set(current.topics) == {"new"}


@pytest.mark.django_db(transaction=True)
def test_change_reaches_watcher_within_a_second(demo, redis_url):
    """A console change (pause off) is seen by a subscribed process in under a second."""
    publish()

    async def scenario() -> float:
        import redis.asyncio as aioredis

        client = aioredis.from_url(redis_url)
        watcher = CatalogWatcher(client, resync_interval=30)
        await watcher.start()
        assert watcher.current.consumer("orders", "shop").paused
        seen = asyncio.Event()
        watcher.on_change(lambda s: seen.set() if not s.consumer("orders", "shop").paused else None)

        def unpause() -> float:
            try:
                with transaction.atomic():
                    policy = ConsumerPolicy.objects.get(name="shop.orders")
                    policy.paused = False
                    policy.save()
                return time.monotonic()
            finally:
                connection.close()  # this ran in an executor thread with its own connection

        started = await sync_to_async(unpause)()
        await asyncio.wait_for(seen.wait(), timeout=5)
        elapsed = time.monotonic() - started
        await watcher.stop()
        await client.aclose()
        return elapsed

    elapsed = asyncio.run(scenario())
    assert elapsed < 1.0
    assert not current_snapshot().consumer("orders", "shop").paused


@pytest.mark.django_db(transaction=True)
def test_one_publish_per_transaction(demo, redis_url):
    import redis

    client = redis.Redis.from_url(redis_url)
    publish()
    before = int(client.get(VERSION_KEY))
    with transaction.atomic():
        for broker in Broker.objects.all():
            broker.weight = 5
            broker.save()
        demo["topic"].description = "changed"
        demo["topic"].save()
    after = int(client.get(VERSION_KEY))
    assert after == before + 1
    assert current_snapshot().brokers[1].weight == 5


@pytest.mark.django_db(transaction=True)
def test_rolled_back_change_publishes_nothing(demo, redis_url):
    import redis

    client = redis.Redis.from_url(redis_url)
    publish()
    before = int(client.get(VERSION_KEY))
    with pytest.raises(RuntimeError), transaction.atomic():
        demo["topic"].description = "never"
        demo["topic"].save()
        raise RuntimeError
    assert int(client.get(VERSION_KEY)) == before
    demo["topic"].description = "now"
    demo["topic"].save()
    assert int(client.get(VERSION_KEY)) == before + 1
