"""``manage.py loaddemo``: create the demo catalog (idempotent; a second run changes nothing).

Creates an admin user ``admin``, a team ``demo-team`` with member ``alice``, the app
``demo-app`` with a token, a cluster with two brokers, the topic ``demo`` (4 partitions in
2 partition groups, archive on) and a producer and an HTTP-enabled consumer policy of
``demo-app`` on ``demo``. Secrets come from MQCLOUD_DEMO_ADMIN_PASSWORD,
MQCLOUD_DEMO_ALICE_PASSWORD and MQCLOUD_DEMO_APP_TOKEN, or are generated and printed once.
"""

from __future__ import annotations

import os
import secrets

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from django.db import transaction

from brokers.models import (
    App,
    Broker,
    Cluster,
    ConsumerPolicy,
    ProducerPolicy,
    Team,
    TeamMembership,
    Topic,
)
from brokers.topology import create_partition_groups


class Command(BaseCommand):
    help = "Load the demo catalog (admin, demo-team, alice, demo-app, two brokers, topic demo)."

    def handle(self, *args: object, **options: object) -> None:
        for line in load_demo():
            self.stdout.write(line)


def _secret(env_name: str) -> tuple[str, bool]:
    value = os.environ.get(env_name, "")
    return (value, False) if value else (secrets.token_urlsafe(12), True)


@transaction.atomic
def load_demo() -> list[str]:
    """Create whatever part of the demo catalog is missing; return lines to print."""
    out: list[str] = []
    users = get_user_model()
    admin = users.objects.filter(username="admin").first()
    if admin is None:
        password, generated = _secret("MQCLOUD_DEMO_ADMIN_PASSWORD")
        users.objects.create_superuser("admin", "admin@localhost", password)
        out.append(f"created user admin, password: {password if generated else '(from env)'}")
    alice = users.objects.filter(username="alice").first()
    if alice is None:
        password, generated = _secret("MQCLOUD_DEMO_ALICE_PASSWORD")
        alice = users.objects.create_user("alice", "alice@localhost", password)
        out.append(f"created user alice, password: {password if generated else '(from env)'}")
    team, _ = Team.objects.get_or_create(name="demo-team", defaults={"description": "Demo team"})
    TeamMembership.objects.get_or_create(team=team, user=alice)

    cluster, _ = Cluster.objects.get_or_create(
        name="demo-cluster", defaults={"description": "Local demo cluster"}
    )
    for broker_id in (1, 2):
        offset = broker_id - 1
        Broker.objects.get_or_create(
            id=broker_id,
            defaults={
                "cluster": cluster,
                "host": settings.BROKER_ADVERTISED_HOST,
                "jmq4_port": settings.JMQ4_PORT + offset,
                "zbus_port": settings.ZBUS_PORT + offset,
                "vibemq_port": settings.VIBEMQ_PORT + offset,
                "data_center": "local",
            },
        )

    app = App.objects.filter(code="demo-app").first()
    if app is None:
        app = App.objects.create(code="demo-app", team=team, description="Demo application")
        token, generated = _secret("MQCLOUD_DEMO_APP_TOKEN")
        app.issue_token(token)
        out.append(f"created app demo-app, token: {token if generated else '(from env)'}")

    topic = Topic.objects.filter(code="demo").first()
    if topic is None:
        topic = Topic.objects.create(
            code="demo",
            cluster=cluster,
            team=team,
            partitions=4,
            creator="loaddemo",
            description="Demo topic",
        )
        create_partition_groups(topic, 2)
        out.append("created topic demo (4 partitions in 2 partition groups)")
    ProducerPolicy.objects.get_or_create(
        topic=topic, app=app, defaults={"archive": True, "http_enabled": True}
    )
    ConsumerPolicy.objects.get_or_create(
        topic=topic, app=app, defaults={"archive": True, "http_enabled": True}
    )
    if not out:
        out.append("demo data already present; nothing changed")
    return out
