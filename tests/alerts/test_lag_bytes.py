"""Lag-bytes alerts: a consumer whose lag times its topic's average message size comes
to the threshold alerts its team, once per throttle window; small messages, the alert
switch and a topic without produce traffic do not."""

from __future__ import annotations

import itertools
import time

import pytest

from brokers.catalog_loader import publish
from brokers.engine import Message
from brokers.models import ConsumerPolicy, ProducerPolicy, Team
from mqcloud.alerts.backlog import check_backlogs
from mqcloud.alerts.models import AlertEvent
from tests import factories
from tests.alerts.conftest import forget_alert_throttles
from tests.engine_calls import engine_call

pytestmark = pytest.mark.django_db
_names = itertools.count(int(time.time()))


@pytest.fixture
def consumer(settings):
    """A consumer of 'large' whose backlog-count alert stays quiet; 10 kB is too much."""
    settings.LAG_BYTES_ALERT_BYTES = 10_000
    forget_alert_throttles()
    team = Team.objects.create(name="bytes")
    factories.user("bytes-watcher", team=team)
    n = next(_names)  # the store outlives each test's database: names of its own
    topic = factories.topic(f"large{n}", factories.cluster_with_brokers(f"lb{n}"), team, 1, 1)
    app, _ = factories.app(f"large-app{n}", team)
    ProducerPolicy.objects.create(topic=topic, app=app)
    policy = ConsumerPolicy.objects.create(
        topic=topic, app=app, start_position="earliest", backlog_alert_count=1_000_000
    )
    publish()
    return policy


def produce(policy: ConsumerPolicy, n: int, size: int) -> None:
    async def run(engine):
        for _ in range(n):
            body = [Message(b"x" * size)]
            await engine.append(policy.topic.code, policy.app.code, body, partition=0)

    engine_call(run)


def lag_bytes_events() -> list[AlertEvent]:
    return list(AlertEvent.objects.filter(kind=AlertEvent.Kind.LAG_BYTES))


def test_a_consumer_behind_by_the_bytes_alerts_its_team_once(consumer):
    produce(consumer, 4, 1_000)
    check_backlogs()
    assert lag_bytes_events() == []  # 4 kB behind
    produce(consumer, 8, 1_000)
    check_backlogs()
    (event,) = lag_bytes_events()
    assert event.team == consumer.app.team and event.target == f"consumer:{consumer.name}"
    # a stored message is its body and ~80 bytes of record around it
    assert event.detail["lag"] == 12 and 12_000 <= event.detail["estimated_bytes"] <= 14_000
    assert "KiB behind: 12 messages of 1,0" in event.message, event.message
    assert not AlertEvent.objects.filter(kind=AlertEvent.Kind.BACKLOG).exists()
    check_backlogs()
    assert len(lag_bytes_events()) == 1  # throttled


def test_small_messages_and_the_alert_switch_keep_it_quiet(consumer):
    produce(consumer, 50, 10)  # 50 messages of under 100 bytes stored
    check_backlogs()
    assert lag_bytes_events() == []
    produce(consumer, 20, 1_000)
    ConsumerPolicy.objects.filter(pk=consumer.pk).update(backlog_alert_enabled=False)
    check_backlogs()
    assert lag_bytes_events() == []


def test_off_at_zero(consumer, settings):
    settings.LAG_BYTES_ALERT_BYTES = 0
    produce(consumer, 20, 1_000)
    check_backlogs()
    assert lag_bytes_events() == []
