"""Celery tasks: broker liveness and leader failover, the preferred-leader rebalance, the
catalog safety-net republish, delayed messages, and failing applications whose execution
was interrupted."""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from asgiref.sync import async_to_sync
from celery import shared_task
from django.conf import settings
from django.db import transaction
from django.db.models import Count, F
from django.utils import timezone

from brokers.catalog_loader import changed_on_commit, publish
from brokers.models import Broker, Cluster, PartitionGroup
from mqcloud.alerts.brokers import alert_brokers_down
from mqcloud.approvals.services import fail_interrupted, record

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractBaseUser
from mqcloud.engine_access import engine_session, run_in_session

log = logging.getLogger(__name__)


@shared_task
def mark_silent_brokers_down() -> list[int]:
    """Mark brokers silent for BROKER_DEAD_AFTER_SECONDS as down and fail their partition
    groups over to live writable brokers of the same cluster."""
    cutoff = timezone.now() - timedelta(seconds=settings.BROKER_DEAD_AFTER_SECONDS)
    with transaction.atomic():
        silent = list(
            Broker.objects.select_for_update()
            .filter(status=Broker.Status.UP, last_heartbeat__lt=cutoff)
            .values_list("id", flat=True)
        )
        if silent:
            Broker.objects.filter(id__in=silent).update(status=Broker.Status.DOWN, up_since=None)
        if silent:
            changed_on_commit(brokers=silent)
        led = _groups_led(silent)
        fail_over_partition_groups()  # each moved group is saved: its topic's delta follows
        if silent:
            still = _groups_led(silent)
            moved = {b: led.get(b, 0) - still.get(b, 0) for b in silent}
            transaction.on_commit(lambda: _alert_down(silent, moved))
    return silent


def _groups_led(broker_ids: list[int]) -> dict[int, int]:
    rows = (
        PartitionGroup.objects.filter(leader_id__in=broker_ids)
        .values("leader_id")
        .annotate(n=Count("id"))
    )
    return {r["leader_id"]: r["n"] for r in rows}


def _alert_down(broker_ids: list[int], moved: dict[int, int]) -> None:
    """Tell the platform admins (and the webhook); failover has happened either way."""
    try:
        alert_brokers_down(broker_ids, moved)
    except Exception:
        log.exception("could not alert that brokers %s are down", broker_ids)


def fail_over_partition_groups() -> int:
    """Give every partition group led by a down broker a live writable leader.

    The new leader is the live writable broker of the topic's cluster leading the fewest
    groups per unit of weight; groups with no such broker keep their leader (and stay
    unavailable until one comes back). Returns how many groups moved.
    """
    moved = 0
    orphans = PartitionGroup.objects.select_related("topic", "leader").filter(
        leader__status=Broker.Status.DOWN
    )
    for group in orphans:
        candidates = list(
            Broker.objects.filter(
                cluster_id=group.topic.cluster_id, status=Broker.Status.UP, writable=True
            ).annotate(led=Count("led_groups"))
        )
        if not candidates:
            continue
        best = min(candidates, key=lambda b: ((b.led + 1) / max(b.weight, 1), b.id))
        record(
            None,
            "leader-failover",
            f"topic:{group.topic.code}",
            team=group.topic.team,
            detail={"group": group.group_id, "from": group.leader_id, "to": best.id},
        )
        group.leader = best
        group.save(update_fields=["leader"])
        moved += 1
    return moved


def rebalance_preferred_leaders(
    healthy_for: float | None = None,
    actor: AbstractBaseUser | None = None,
    cluster: Cluster | None = None,
) -> list[dict[str, Any]]:
    """Move every partition group back to its preferred leader where that broker is up,
    writable, heartbeating and has been up for ``healthy_for`` seconds (default
    ``PREFERRED_LEADER_HEALTHY_SECONDS``), as Kafka's preferred-leader election does.

    Each move is audited (``leader-preferred``, by ``actor`` or by the platform) and the
    catalog is published once when the transaction commits; the published leaders fence
    the previous leader's produces. ``cluster`` limits it to that cluster's topics.
    Returns the moves.
    """
    if healthy_for is None:
        healthy_for = settings.PREFERRED_LEADER_HEALTHY_SECONDS
    now = timezone.now()
    moves: list[dict[str, Any]] = []
    with transaction.atomic():
        groups = (
            PartitionGroup.objects.select_for_update(of=("self",))
            .select_related("topic", "topic__team")
            .filter(
                preferred_leader__status=Broker.Status.UP,
                preferred_leader__writable=True,
                preferred_leader__up_since__lte=now - timedelta(seconds=healthy_for),
                preferred_leader__last_heartbeat__gte=now
                - timedelta(seconds=settings.BROKER_DEAD_AFTER_SECONDS),
                preferred_leader__cluster_id=F("topic__cluster_id"),
            )
            .exclude(leader_id=F("preferred_leader_id"))
            .order_by("topic__code", "group_id")
        )
        if cluster is not None:
            groups = groups.filter(topic__cluster=cluster)
        for group in groups:
            move = {
                "topic": group.topic.code,
                "group": group.group_id,
                "from": group.leader_id,
                "to": group.preferred_leader_id,
            }
            record(
                actor,
                "leader-preferred",
                f"topic:{group.topic.code}",
                team=group.topic.team,
                detail={k: v for k, v in move.items() if k != "topic"},
            )
            group.leader_id = group.preferred_leader_id
            group.save(update_fields=["leader"])
            moves.append(move)
    return moves


def elect_preferred_leaders(cluster: Cluster, actor: AbstractBaseUser) -> list[dict[str, Any]]:
    """An admin's "elect preferred leaders now" for one cluster: every group whose preferred
    leader is up, writable and heartbeating goes back to it, without waiting for the
    healthy time. The run itself is audited (``preferred-leader-election``) and so is each
    move. Returns the moves."""
    with transaction.atomic():
        moves = rebalance_preferred_leaders(healthy_for=0, actor=actor, cluster=cluster)
        record(
            actor,
            "preferred-leader-election",
            f"cluster:{cluster.name}",
            detail={"moved": len(moves)},
        )
    return moves


@shared_task
def rebalance_preferred_leaders_task() -> list[dict[str, Any]]:
    """Beat (every 10 s, when PREFERRED_LEADER_AUTO_REBALANCE is on): give recovered brokers
    their preferred groups back once they have been up PREFERRED_LEADER_HEALTHY_SECONDS."""
    if not settings.PREFERRED_LEADER_AUTO_REBALANCE:
        return []
    return rebalance_preferred_leaders()


@shared_task
def apply_retention() -> int:
    """Trim every topic with a retention limit (beat: every minute)."""
    return async_to_sync(_trim_all)()


async def _trim_all() -> int:
    async with engine_session() as engine:
        return len(await engine.trim_all())


@shared_task
def sweep_transactions() -> int:
    """Drop expired transactions of every producer (beat: every minute)."""
    return async_to_sync(_sweep_transactions)()


async def _sweep_transactions() -> int:
    swept = 0
    async with engine_session() as engine:
        for producer in engine.catalog.producers:
            swept += await engine.sweep_transactions(producer.topic, producer.app)
    return swept


@shared_task
def forget_idle_broadcast_clients() -> int:
    """Forget the broadcast clients that have not fetched for
    BROADCAST_CLIENT_RETENTION_DAYS (0: never), with their progress and own retries
    (beat: every hour); returns how many went."""
    days = settings.BROADCAST_CLIENT_RETENTION_DAYS
    if days <= 0:
        return 0
    gone = run_in_session(lambda engine: engine.forget_idle_clients(idle_ms=int(days * 86_400_000)))
    for (topic, app), clients in gone.items():
        log.info(
            "forgot %d broadcast client(s) of %s on %s idle for %s days: %s",
            len(clients), app, topic, days, ", ".join(clients[:20]),
        )  # fmt: skip
    return sum(len(clients) for clients in gone.values())


@shared_task
def republish_catalog() -> int:
    """Publish the catalog snapshot again (covers a publish lost to a Redis outage)."""
    return publish().version


@shared_task
def release_delayed_messages() -> int:
    """Append the delayed and timer messages that are due (beat runs it every second)."""
    return run_in_session(lambda engine: engine.release_all_delayed())


@shared_task
def make_capacity_report() -> bool:
    """Make yesterday's capacity report unless it exists, and e-mail it to the platform
    admins unless it was (beat: hourly, so a beat that was down at midnight, or mail
    that was, catches up); whether it made one."""
    from mqcloud.console.capacity import make_missing_report
    from mqcloud.console.capacity_mail import mail_latest_report

    made = make_missing_report()
    mail_latest_report()
    return made


@shared_task
def retry_alert_deliveries() -> int:
    """Send again what fired alerts could not send because a channel failed (beat: every
    minute); returns how many events were tried."""
    from mqcloud.alerts.delivery import retry_pending

    return retry_pending()


@shared_task
def check_backlog_alerts() -> int:
    """Record every consumer's lag and fire backlog alerts (beat: every minute); returns
    how many fired."""
    from mqcloud.alerts.backlog import check_backlogs

    return len(check_backlogs())


@shared_task
def check_dead_letter_alerts() -> int:
    """Fire dead-letter alerts for consumers whose dead letters grew (beat: every minute);
    returns how many fired."""
    from mqcloud.alerts.dead_letters import check_dead_letters

    return len(check_dead_letters())


@shared_task
def check_process_alerts() -> int:
    """Alert the platform admins of processes that died (and were started again) and of
    HTTP-MQ proxy processes that stopped reporting (beat: every minute); returns how many
    fired."""
    from mqcloud.alerts.processes import check_processes

    return len(check_processes())


@shared_task
def check_store_latency_alerts() -> int:
    """Alert the platform admins of processes whose store writes were slow in the last
    minute (beat: every minute); returns how many fired."""
    from mqcloud.alerts.store import check_store_latency

    return len(check_store_latency())


@shared_task
def check_replica_lag_alerts() -> int:
    """Alert the platform admins of store replicas too far behind or not online (beat:
    every minute); returns how many fired."""
    from mqcloud.alerts.replicas import check_replica_lag

    return len(check_replica_lag())


@shared_task
def check_retention_loss_alerts() -> int:
    """Fire an alert for every consumer that lost messages to retention before reading
    them (beat: every minute); returns how many fired."""
    from mqcloud.alerts.retention_losses import check_retention_losses

    return len(check_retention_losses())


@shared_task
def check_consume_failure_alerts() -> int:
    """Fire consume-failure alerts for consumers that failed too many messages in the last
    hour (beat: every minute); returns how many fired."""
    from mqcloud.alerts.failures import check_consume_failures

    return len(check_consume_failures())


@shared_task
def check_offset_move_alerts() -> int:
    """Fire offset-move alerts for consumers whose committed offset a client moved in the
    last hour (beat: every minute); returns how many fired."""
    from mqcloud.alerts.offset_moves import check_offset_moves

    return len(check_offset_moves())


@shared_task
def check_blocked_consumer_alerts() -> int:
    """Fire blocked-consumer alerts for sequential consumers stuck on a message (beat:
    every 30 seconds); returns how many fired."""
    from mqcloud.alerts.blocked import check_blocked

    return len(check_blocked())


@shared_task
def check_traffic_silence_alerts() -> int:
    """Fire traffic-silence alerts for opted-in topics nothing was produced to for their
    silence (beat: every minute); returns how many fired."""
    from mqcloud.alerts.silence import check_silence

    return len(check_silence())


@shared_task
def expire_message_exports() -> int:
    """Remove message exports older than MESSAGE_EXPORT_RETENTION_DAYS (beat: hourly);
    returns how many files went."""
    from mqcloud.exports import expire_exports

    return expire_exports()


@shared_task
def check_traffic_rule_alerts() -> int:
    """Check the topics' traffic rules that are due and fire those that match (beat: every
    minute); returns how many fired."""
    from mqcloud.alerts.rules import check_rules

    return len(check_rules())


@shared_task
def check_produce_refusal_alerts() -> int:
    """Fire produce-refusal alerts for apps whose messages were refused too often in the
    last hour (beat: every minute); returns how many fired."""
    from mqcloud.alerts.refusals import check_refusals

    return len(check_refusals())


@shared_task
def check_traffic_surge_alerts() -> int:
    """Sum up the topics' daily peaks that are due and fire traffic-surge alerts (beat:
    every 5 minutes); returns how many fired."""
    from mqcloud.alerts.surges import check_surges

    return len(check_surges())


@shared_task
def fail_interrupted_applications() -> list[int]:
    """Fail applications left executing by a process that died (beat: every minute);
    returns their ids. The limit is APPLICATION_EXECUTION_LIMIT_SECONDS."""
    from mqcloud.operations import task_running

    limit = timedelta(seconds=settings.APPLICATION_EXECUTION_LIMIT_SECONDS)
    return [app.pk for app in fail_interrupted(limit, task_running)]
