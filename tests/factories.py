"""Small builders of catalog objects for tests (plain functions, no magic)."""

from __future__ import annotations

from django.contrib.auth import get_user_model

from brokers.models import App, Broker, Cluster, Team, TeamMembership, Topic
from brokers.topology import create_partition_groups
from mqcloud.api.models import ApiToken


def user(username: str, *, admin: bool = False, team: Team | None = None, role: str = "member"):
    """A user (a platform admin when ``admin``), optionally a member of ``team``."""
    users = get_user_model()
    if admin:
        u = users.objects.create_superuser(username, f"{username}@example.test", "pw-Secret-123")
    else:
        u = users.objects.create_user(username, f"{username}@example.test", "pw-Secret-123")
    if team is not None:
        TeamMembership.objects.create(team=team, user=u, role=role)
    return u


def token_for(u) -> str:
    """A REST API token of ``u``."""
    return ApiToken.issue(u)


def cluster_with_brokers(name: str = "c1", brokers: int = 2, first_id: int = 1) -> Cluster:
    """A cluster with ``brokers`` writable brokers with distinct ports."""
    cluster = Cluster.objects.create(name=name)
    for i in range(brokers):
        bid = first_id + i
        Broker.objects.create(
            id=bid,
            cluster=cluster,
            host="127.0.0.1",
            jmq4_port=50000 + bid,
            zbus_port=51000 + bid,
            vibemq_port=52000 + bid,
            status=Broker.Status.UP,
        )
    return cluster


def topic(code: str, cluster: Cluster, team: Team, partitions: int = 4, groups: int = 2) -> Topic:
    """A topic with its partition groups laid out."""
    t = Topic.objects.create(code=code, cluster=cluster, team=team, partitions=partitions)
    create_partition_groups(t, groups)
    return t


def app(code: str, team: Team) -> tuple[App, str]:
    """An app and its token."""
    a = App.objects.create(code=code, team=team)
    return a, a.issue_token()
