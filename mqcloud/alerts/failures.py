"""Consume-failure alerts: a consumer that failed at least its threshold of messages in
the last hour — a nack, a JMQ4 retry ack, a failed retry, a VibeMQ ack timeout, a pull
batch whose fetch lock ran out unacked (JMQ4, HTTP-MQ), over any protocol, on any broker
— alerts its team, before its retries run out and the messages become dead letters. The threshold is the consumer's ``failure_alert_per_hour``,
else CONSUME_FAILURE_ALERT_PER_HOUR (0: never). Consumers with their alerts switched off
(``backlog_alert_enabled``, the consumer's alert switch) are not checked. The engine counts
failures per group and minute (``Engine.consume_failures``: one Redis round trip per
LAG_BATCH groups); an alert key fires at most once per ALERT_THROTTLE_SECONDS, as backlog
alerts do. An alert says how many of the failures its topic's send-back limit kept out of
the retry store (delivered again at once instead: ``Engine.held_back_send_backs``, asked
only for the consumers over their threshold).
"""

from __future__ import annotations

from django.conf import settings

from brokers.models import ConsumerPolicy
from mqcloud.alerts.models import AlertEvent
from mqcloud.alerts.watched import alert_over, per_consumer, watched_consumers

WINDOW_MINUTES = 60


def threshold_of(policy: ConsumerPolicy) -> int:
    """How many failures in an hour alert for ``policy``: its own threshold, else the
    platform's default (0: never)."""
    own = policy.failure_alert_per_hour
    return settings.CONSUME_FAILURE_ALERT_PER_HOUR if own is None else own


def check_consume_failures() -> list[AlertEvent]:
    """Fire an alert for every checked consumer that failed at least its threshold of
    messages in the last hour."""
    policies = [p for p in watched_consumers() if threshold_of(p) > 0]
    if not policies:
        return []
    failures = per_consumer(
        policies, lambda engine, groups: engine.consume_failures(groups, minutes=WINDOW_MINUTES)
    )

    over = [p for p in policies if failures.get(p.name, 0) >= threshold_of(p)]
    held = (
        per_consumer(
            over,
            lambda engine, groups: engine.held_back_send_backs(groups, minutes=WINDOW_MINUTES),
        )
        if over
        else {}
    )

    def describe(policy: ConsumerPolicy, count: int, threshold: int) -> tuple[str, dict]:
        held_back = held.get(policy.name, 0)
        note = f" ({held_back} held back by the topic's send-back limit)" if held_back else ""
        return (
            f"Consume failures of {policy.name}: {count} in the last hour{note}",
            {
                "failures": count,
                "threshold": threshold,
                "minutes": WINDOW_MINUTES,
                "held_back": held_back,
            },
        )

    return alert_over(
        policies,
        failures,
        kind=AlertEvent.Kind.CONSUME_FAILURES,
        key="consume-failures",
        threshold=threshold_of,
        describe=describe,
    )
