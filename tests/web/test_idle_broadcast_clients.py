"""The hourly beat task that forgets broadcast clients idle past the retention."""

from __future__ import annotations

import time

import pytest
import redis
from django.conf import settings as django_settings

from brokers.catalog_loader import publish
from brokers.models import ConsumerPolicy, ProducerPolicy, Team
from mqcloud.tasks import forget_idle_broadcast_clients
from tests import factories
from tests.engine_calls import engine_call

pytestmark = pytest.mark.django_db

DAY_MS = 86_400_000


@pytest.fixture
def broadcast_clients():
    """A broadcast consumer whose client ``old`` last fetched 8 days ago and ``new`` now."""
    store = redis.Redis.from_url(django_settings.REDIS_URL)
    store.flushall()
    team = Team.objects.create(name="bc")
    topic = factories.topic("feed", factories.cluster_with_brokers("bc"), team, 1, 1)
    app, _ = factories.app("reader", team)
    ProducerPolicy.objects.create(topic=topic, app=app)
    ConsumerPolicy.objects.create(topic=topic, app=app, mode=ConsumerPolicy.Mode.BROADCAST)
    publish()

    async def fetch(engine) -> None:
        for client_id in ("old", "new"):
            await engine.fetch("feed", "reader", client_id=client_id, owner=client_id)

    engine_call(fetch)
    registry = next(store.scan_iter(match="*feed:reader}:clients"))
    store.zadd(registry, {"old": int(time.time() * 1000) - 8 * DAY_MS})
    yield registry
    store.close()


def listed() -> list[str]:
    return sorted(
        engine_call(lambda e: e.broadcast_clients("feed", "reader", active_within_ms=None))
    )


def test_idle_clients_go_after_the_retention(broadcast_clients, settings):
    settings.BROADCAST_CLIENT_RETENTION_DAYS = 7
    assert forget_idle_broadcast_clients() == 1
    assert listed() == ["new"]
    assert forget_idle_broadcast_clients() == 0


def test_no_retention_keeps_every_client(broadcast_clients, settings):
    settings.BROADCAST_CLIENT_RETENTION_DAYS = 0
    assert forget_idle_broadcast_clients() == 0
    assert listed() == ["new", "old"]
    settings.BROADCAST_CLIENT_RETENTION_DAYS = 9
    assert forget_idle_broadcast_clients() == 0
