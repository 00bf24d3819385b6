"""Fixtures shared by the alert tests."""

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


def watched_and_quiet(team_name: str, name: str, app: str, quiet: str):
    """An empty Redis, and topic ``name`` of team ``team_name`` (with a user) produced by
    ``app`` and consumed by ``app`` (alerts on) and ``quiet`` (alerts off); published."""
    client = redis.Redis.from_url(django_settings.REDIS_URL)
    client.flushall()  # earlier tests' counts and throttle keys
    client.close()
    team = Team.objects.create(name=team_name)
    factories.user(f"{team_name}-watcher", team=team)
    topic = factories.topic(name, factories.cluster_with_brokers(name[:2]), team, 1, 1)
    loud, _ = factories.app(app, team)
    silent, _ = factories.app(quiet, team)
    ProducerPolicy.objects.create(topic=topic, app=loud)
    ConsumerPolicy.objects.create(topic=topic, app=loud, start_position="earliest")
    ConsumerPolicy.objects.create(
        topic=topic, app=silent, start_position="earliest", backlog_alert_enabled=False
    )
    publish()
    return topic
