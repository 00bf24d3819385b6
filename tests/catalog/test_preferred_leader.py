"""Preferred leaders (issue 20 item 9): a group remembers the leader it was created with,
failover keeps that preference, and the rebalance gives the group back to it once the
broker has been up, writable and heartbeating for the configured while — audited."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import transaction
from django.utils import timezone
from rest_framework.test import APIClient

from brokers.catalog_loader import CatalogChanges
from brokers.models import Broker, PartitionGroup, Team, Topic
from mqcloud.approvals.models import AuditEvent
from mqcloud.tasks import (
    mark_silent_brokers_down,
    rebalance_preferred_leaders,
    rebalance_preferred_leaders_task,
)
from tests import factories

pytestmark = pytest.mark.django_db


@pytest.fixture
def failed_over(settings) -> Topic:
    """Brokers 70 and 71 leading one group each of ``pl``; 70 went silent and failover gave
    its group to 71; 70 has just come back up."""
    settings.BROKER_DEAD_AFTER_SECONDS = 10
    cluster = factories.cluster_with_brokers("pl", brokers=2, first_id=70)
    topic = factories.topic("pl", cluster, Team.objects.create(name="pl-team"), 4, 2)
    assert [(g.leader_id, g.preferred_leader_id) for g in topic.groups.all()] == [
        (70, 70),
        (71, 71),
    ]
    now = timezone.now()
    Broker.objects.filter(id=70).update(last_heartbeat=now - timedelta(seconds=30))
    Broker.objects.filter(id=71).update(last_heartbeat=now, up_since=now - timedelta(hours=1))
    assert mark_silent_brokers_down() == [70]
    assert Broker.objects.get(id=70).up_since is None
    assert [(g.leader_id, g.preferred_leader_id) for g in topic.groups.all()] == [
        (71, 70),
        (71, 71),
    ]
    Broker.objects.filter(id=70).update(status=Broker.Status.UP, last_heartbeat=now, up_since=now)
    return topic


def _leaders(topic: Topic) -> list[int]:
    return [g.leader_id for g in topic.groups.all()]


def test_a_recovered_broker_gets_its_group_back_after_the_healthy_time(failed_over):
    assert rebalance_preferred_leaders(healthy_for=60) == []  # up, but not for long enough
    assert _leaders(failed_over) == [71, 71]
    Broker.objects.filter(id=70).update(up_since=timezone.now() - timedelta(seconds=61))
    moves = rebalance_preferred_leaders(healthy_for=60)
    assert moves == [{"topic": "pl", "group": 0, "from": 71, "to": 70}]
    assert _leaders(failed_over) == [70, 71]
    event = AuditEvent.objects.get(action="leader-preferred")
    assert (event.target, event.actor, event.detail) == (
        "topic:pl",
        None,
        {"group": 0, "from": 71, "to": 70},
    )
    assert rebalance_preferred_leaders(healthy_for=60) == []  # nothing left to move


@pytest.mark.parametrize(
    "change",
    [
        {"writable": False},
        {"status": Broker.Status.DOWN},
        {"last_heartbeat": timezone.now() - timedelta(minutes=5)},
    ],
    ids=["not-writable", "down", "silent"],
)
def test_an_unhealthy_preferred_leader_gets_nothing(failed_over, change):
    Broker.objects.filter(id=70).update(up_since=timezone.now() - timedelta(hours=1), **change)
    assert rebalance_preferred_leaders(healthy_for=60) == []
    assert _leaders(failed_over) == [71, 71]


def test_the_beat_task_follows_the_settings(failed_over, settings):
    settings.PREFERRED_LEADER_HEALTHY_SECONDS = 0
    settings.PREFERRED_LEADER_AUTO_REBALANCE = False
    assert rebalance_preferred_leaders_task() == []
    settings.PREFERRED_LEADER_AUTO_REBALANCE = True
    assert len(rebalance_preferred_leaders_task()) == 1
    assert _leaders(failed_over) == [70, 71]
    pending = transaction.get_connection().run_on_commit
    published = [cb for _, cb, _ in pending if isinstance(cb, CatalogChanges)]
    assert any(changes.topic_ids for changes in published)  # the moved group fences the old


def test_a_group_saved_without_a_preference_prefers_its_leader():
    cluster = factories.cluster_with_brokers("pl2", brokers=2, first_id=80)
    topic = factories.topic("pl2", cluster, Team.objects.create(name="pl2-team"), 2, 1)
    group = topic.groups.get()
    group.preferred_leader = None
    group.leader_id = 81
    group.save(update_fields=["leader", "preferred_leader"])
    assert PartitionGroup.objects.get(pk=group.pk).preferred_leader_id == 81
    Broker.objects.filter(id=81).update(up_since=timezone.now() - timedelta(hours=1))
    assert rebalance_preferred_leaders(healthy_for=0) == []


def _api(user) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {factories.token_for(user)}")
    return client


def test_an_admin_elects_preferred_leaders_now_through_the_api(failed_over):
    cluster = failed_over.cluster
    url = f"/api/v1/clusters/{cluster.pk}/preferred-leader-election/"
    alice = factories.user("alice", team=failed_over.team)
    refused = _api(alice).post(url)
    assert refused.status_code == 403 and _leaders(failed_over) == [71, 71]
    root = factories.user("root", admin=True)
    done = _api(root).post(url)  # broker 70 is up: no healthy wait for an admin's election
    assert done.status_code == 200, done.content
    assert done.json() == {"moves": [{"topic": "pl", "group": 0, "from": 71, "to": 70}]}
    assert _leaders(failed_over) == [70, 71]
    assert AuditEvent.objects.get(action="leader-preferred").actor == root
    run = AuditEvent.objects.get(action="preferred-leader-election")
    assert (run.actor, run.target, run.detail) == (root, "cluster:pl", {"moved": 1})
    assert _api(root).post(url).json() == {"moves": []}
    assert _api(root).post("/api/v1/clusters/999999/preferred-leader-election/").status_code == 404


def test_an_admin_elects_preferred_leaders_from_the_console(failed_over, client):
    cluster = failed_over.cluster
    url = f"/clusters/{cluster.pk}/elect-preferred-leaders/"
    client.force_login(factories.user("alice", team=failed_over.team))
    assert "Elect preferred leaders" not in client.get("/clusters/").content.decode()
    assert client.post(url).status_code == 403
    assert _leaders(failed_over) == [71, 71]
    root = factories.user("root", admin=True)
    client.force_login(root)
    assert "Elect preferred leaders" in client.get("/clusters/").content.decode()
    assert client.get(url).status_code == 405
    page = client.post(url, follow=True)
    assert "pl group 0 → broker 70" in page.content.decode()
    assert _leaders(failed_over) == [70, 71]
    assert AuditEvent.objects.filter(action="preferred-leader-election", actor=root).exists()
