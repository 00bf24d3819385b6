"""Retention-loss alerts (the reference console's "offset illegal"): a consumer that
retention overtook — messages it had neither acked nor in hand expired from its topic —
alerts its team with how many it lost. Nothing else tells it: the consumer goes on from the first
message kept, its backlog shrinks and no error is raised.

The engine counts the losses when it trims (:meth:`Engine.trim`), over every protocol;
this check (every minute) reads what is not yet settled, alerts, and settles what it
reported. An alert key fires at most once per ALERT_THROTTLE_SECONDS: losses during the
quiet time are kept and reported, summed, by the next alert. A consumer with its alerts
switched off (``backlog_alert_enabled``) is not alerted; its losses are settled
silently, as are those of a consumer that no longer exists.
"""

from __future__ import annotations

import redis
from django.conf import settings

from brokers.models import ConsumerPolicy, Topic
from mqcloud.alerts.delivery import alert_team, first_in_window
from mqcloud.alerts.models import AlertEvent
from mqcloud.engine_access import run_in_session


def describe_retention(topic: Topic) -> str:
    """What ``topic`` keeps, in words: 'the last 1000 messages per partition', 'messages
    for 3600 s' or both."""
    parts = []
    if topic.retention_max_count is not None:
        parts.append(f"the last {topic.retention_max_count} messages per partition")
    if topic.retention_max_age_s is not None:
        parts.append(f"messages for {topic.retention_max_age_s} s")
    return " and ".join(parts) or "everything"


def check_retention_losses() -> list[AlertEvent]:
    """Alert every consumer with unsettled retention losses (not within its throttle
    window); settle what was reported or is nobody's to report."""
    losses = run_in_session(lambda engine: engine.retention_losses())
    if not losses:
        return []
    wanted = {app for _, app in losses}
    policies = {
        (p.topic.code, p.app.code): p
        for p in ConsumerPolicy.objects.filter(
            topic__code__in={topic for topic, _ in losses}, app__code__in=wanted
        ).select_related("topic", "app__team")
    }
    settled: dict[tuple[str, str], int] = {}
    fired: list[AlertEvent] = []
    client = redis.Redis.from_url(settings.REDIS_URL)
    try:
        for pair, lost in sorted(losses.items()):
            policy = policies.get(pair)
            if policy is None or not policy.backlog_alert_enabled:
                settled[pair] = lost
                continue
            if not first_in_window(client, f"retention-loss:{policy.name}"):
                continue  # kept for the next alert
            topic = policy.topic
            fired.append(
                alert_team(
                    AlertEvent.Kind.RETENTION_LOSS,
                    f"consumer:{policy.name}",
                    policy.app.team,
                    f"{policy.name} lost {lost} messages of {topic.code} to retention: "
                    f"they expired before it read them (the topic keeps "
                    f"{describe_retention(topic)})",
                    {
                        "lost": lost,
                        "topic": topic.code,
                        "retention_max_count": topic.retention_max_count,
                        "retention_max_age_s": topic.retention_max_age_s,
                    },
                )
            )
            settled[pair] = lost
    finally:
        client.close()
    if settled:
        run_in_session(lambda engine: engine.settle_retention_losses(settled))
    return fired
