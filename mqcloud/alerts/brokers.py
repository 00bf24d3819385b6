"""Broker alerts: a broker marked down (silent past ``BROKER_DEAD_AFTER_SECONDS``) is
reported to the platform admins and the webhook, once per time it goes down — with what
its failure left: the partition groups that moved to another leader, and those that found
no live writable broker to take them (their partitions take no writes until one comes).
"""

from __future__ import annotations

from brokers.models import Broker, PartitionGroup
from mqcloud.alerts.delivery import alert_admins, platform_admin_emails
from mqcloud.alerts.models import AlertEvent

NAMED_TOPICS = 10


def alert_brokers_down(broker_ids: list[int], moved: dict[int, int]) -> list[AlertEvent]:
    """Fire one alert per broker in ``broker_ids`` (just marked down); ``moved``: how many
    partition groups each one's failover gave another leader."""
    fired = []
    recipients = platform_admin_emails()
    for broker in Broker.objects.filter(id__in=broker_ids).order_by("id"):
        stranded = list(
            PartitionGroup.objects.filter(leader=broker)
            .values_list("topic__code", flat=True)
            .distinct()
            .order_by("topic__code")
        )
        named = ", ".join(stranded[:NAMED_TOPICS]) + ("…" if len(stranded) > NAMED_TOPICS else "")
        left = f"; no live writable broker took the groups of {named}" if stranded else ""
        heartbeat = broker.last_heartbeat.isoformat() if broker.last_heartbeat else None
        event = alert_admins(
            AlertEvent.Kind.BROKER_DOWN,
            f"broker:{broker.id}",
            f"Broker {broker.id} ({broker.host}) is down: no heartbeat since {heartbeat};"
            f" {moved.get(broker.id, 0)} partition groups moved to other leaders{left}",
            {
                "broker": broker.id,
                "host": broker.host,
                "last_heartbeat": heartbeat,
                "groups_moved": moved.get(broker.id, 0),
                "topics_without_leader": stranded,
            },
            recipients,
        )
        fired.append(event)
    return fired
