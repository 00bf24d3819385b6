"""A small catalog for console tests: two teams, their users, a topic, app and consumer."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import pytest
import redis.asyncio as aioredis

from brokers.catalog_loader import publish
from brokers.models import App, ConsumerPolicy, ProducerPolicy, Team, Topic
from tests import factories


@dataclass
class World:
    red: Team
    blue: Team
    alice: object  # red member
    carol: object  # red team admin
    bob: object  # blue member
    root: object  # platform admin
    topic: Topic
    app: App
    consumer: ConsumerPolicy
    producer: ProducerPolicy
    blue_topic: Topic
    blue_consumer: ConsumerPolicy


@pytest.fixture
def world(db, redis_url) -> World:
    return build_world(redis_url)


def build_world(redis_url: str) -> World:
    """The catalog (published) on a flushed Redis; for a test with database access."""
    asyncio.run(_flush(redis_url))
    red, blue = Team.objects.create(name="red"), Team.objects.create(name="blue")
    cluster = factories.cluster_with_brokers()
    topic = factories.topic("orders", cluster, red, partitions=2, groups=1)
    blue_topic = factories.topic("blue-secret", cluster, blue, partitions=1, groups=1)
    app, _ = factories.app("shop", red)
    blue_app, _ = factories.app("blue-app", blue)
    producer = ProducerPolicy.objects.create(topic=topic, app=app)
    consumer = ConsumerPolicy.objects.create(topic=topic, app=app, start_position="earliest")
    ProducerPolicy.objects.create(topic=blue_topic, app=blue_app)
    blue_consumer = ConsumerPolicy.objects.create(topic=blue_topic, app=blue_app)
    publish()
    return World(
        red=red,
        blue=blue,
        alice=factories.user("alice", team=red),
        carol=factories.user("carol", team=red, role="admin"),
        bob=factories.user("bob", team=blue),
        root=factories.user("root", admin=True),
        topic=topic,
        app=app,
        consumer=consumer,
        producer=producer,
        blue_topic=blue_topic,
        blue_consumer=blue_consumer,
    )


async def _flush(url: str) -> None:
    client = aioredis.from_url(url)
    await client.flushall()
    await client.aclose()
