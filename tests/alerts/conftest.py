"""Fixtures shared by the traffic alert tests (silence, rules)."""

from __future__ import annotations

import pytest
import redis
from django.conf import settings as django_settings

from brokers.catalog_loader import publish
from brokers.models import ConsumerPolicy, ProducerPolicy, Team
from tests import factories


def forget_alert_throttles() -> None:
    """No alert key is throttled from an earlier test (the store outlives its database)."""
    client = redis.Redis.from_url(django_settings.REDIS_URL)
    for key in client.scan_iter("mqcloud:alert:*"):
        client.delete(key)
    client.close()


@pytest.fixture
def traffic_topics() -> None:
    """Topics 'feed' and 'other' of team red, produced by red's app 'maker' and consumed
    by blue's 'taker' (users rita of red, bert of blue); Redis emptied, so no alert is
    throttled from before; the catalog published."""
    client = redis.Redis.from_url(django_settings.REDIS_URL)
    client.flushall()
    client.close()
    red, blue = Team.objects.create(name="red"), Team.objects.create(name="blue")
    factories.user("rita", team=red)
    factories.user("bert", team=blue)
    cluster = factories.cluster_with_brokers("tt")
    maker, _ = factories.app("maker", red)
    taker, _ = factories.app("taker", blue)
    for code in ("feed", "other"):
        topic = factories.topic(code, cluster, red, 1, 1)
        ProducerPolicy.objects.create(topic=topic, app=maker)
        ConsumerPolicy.objects.create(topic=topic, app=taker)
    publish()
