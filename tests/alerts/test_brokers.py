"""A broker marked down is reported once to the platform admins and the webhook, with
what its failover left: groups moved, and topics whose groups found no new leader."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core import mail
from django.utils import timezone

from brokers.models import Broker, Team
from mqcloud.alerts.models import AlertEvent
from mqcloud.tasks import mark_silent_brokers_down
from tests import factories
from tests.alerts.test_backlog import webhook  # noqa: F401 (a fixture)

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_broker_marked_down_is_reported_once(settings, webhook):  # noqa: F811
    settings.BROKER_DEAD_AFTER_SECONDS = 10
    root = factories.user("root", admin=True)
    root.email = "root@example.com"
    root.save()
    factories.user("member", team=Team.objects.create(name="t"))  # no platform admin
    cluster = factories.cluster_with_brokers("down", brokers=2, first_id=80)
    team = Team.objects.get(name="t")
    factories.topic("moves", cluster, team, 2, 2)  # groups on 80 and 81
    now = timezone.now()
    Broker.objects.filter(id=80).update(last_heartbeat=now - timedelta(seconds=30))
    Broker.objects.filter(id=81).update(last_heartbeat=now, writable=False)  # takes nothing

    assert mark_silent_brokers_down() == [80]

    (event,) = AlertEvent.objects.filter(kind=AlertEvent.Kind.BROKER_DOWN)
    assert event.target == "broker:80" and event.team is None
    assert event.detail["groups_moved"] == 0 and event.detail["topics_without_leader"] == ["moves"]
    assert "no live writable broker took the groups of moves" in event.message
    assert [m.to for m in mail.outbox] == [["root@example.com"]] and event.emailed
    assert [w["kind"] for w in webhook] == ["broker_down"]
    assert mark_silent_brokers_down() == []  # already down: no second alert
    assert AlertEvent.objects.filter(kind=AlertEvent.Kind.BROKER_DOWN).count() == 1
