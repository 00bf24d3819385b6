"""Offset-move alerts (the reference console's "offset moved"): a consumer whose committed
offset moved in the last hour other than by consuming — a client's forceAck rewound it
(its messages come again) or skipped ahead (what it skipped is never read), or an offset
it committed or was given lay past its partition's end (HTTP-MQ OFFSET_ILLEGAL) — alerts
its team with how often, at least OFFSET_MOVE_ALERT_PER_HOUR times (0: never).

Moves made by the platform are not alerted: offset resets, skipped backlogs and
re-consumes are approved applications, and what retention overtook is a retention loss
(:mod:`mqcloud.alerts.retention_losses`). The engine counts moves per group and minute
(``Engine.offset_moves``: one Redis round trip per LAG_BATCH groups); consumers with
their alerts switched off (``backlog_alert_enabled``) are not checked; an alert key fires
at most once per ALERT_THROTTLE_SECONDS.
"""

from __future__ import annotations

from django.conf import settings

from brokers.models import ConsumerPolicy
from mqcloud.alerts.models import AlertEvent
from mqcloud.alerts.watched import alert_over, per_consumer, watched_consumers

WINDOW_MINUTES = 60


def check_offset_moves() -> list[AlertEvent]:
    """Fire an alert for every checked consumer whose offset moved at least the
    threshold's times in the last hour."""
    limit = settings.OFFSET_MOVE_ALERT_PER_HOUR
    if limit <= 0:
        return []
    policies = watched_consumers()
    if not policies:
        return []
    moves = per_consumer(
        policies, lambda engine, groups: engine.offset_moves(groups, minutes=WINDOW_MINUTES)
    )

    def describe(policy: ConsumerPolicy, count: int, threshold: int) -> tuple[str, dict]:
        return (
            f"The committed offset of {policy.name} moved {count} time"
            f"{'' if count == 1 else 's'} in the last hour other than by consuming: "
            "a client rewound or skipped it (forceAck), or committed past the end",
            {"moves": count, "threshold": threshold, "minutes": WINDOW_MINUTES},
        )

    return alert_over(
        policies,
        moves,
        kind=AlertEvent.Kind.OFFSET_MOVED,
        key="offset-moves",
        threshold=lambda policy: limit,
        describe=describe,
    )
