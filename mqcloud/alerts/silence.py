"""Traffic-silence alerts: a topic whose producers stop alerts whoever its traffic alerts go
to (``surge_alert_receiver``: the teams of its producers or of its consumers, the platform
admins, or nobody) — the surge alert's counterpart, for the failure nothing else notices:
a producer that crashed, lost its credentials or was deployed pointing elsewhere leaves
its consumers with no backlog and no errors, just nothing.

A topic opts in with ``silence_alert_minutes`` (1–1440; 0, the default: never). Checked
every minute: a topic with nothing produced in that many minutes before the current one
nor in the current one (the engine's per-minute produce counters, every protocol and
broker together) alerts,
at most once per ``ALERT_THROTTLE_SECONDS`` as the other alerts. A topic younger than its
silence is left alone: it has not been silent that long. One pipelined engine round
trip per thousand or so topics checked; recipients are looked up only for the topics that fire.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from brokers.models import Topic
from mqcloud.alerts.delivery import TrafficAlert, fire_traffic_alerts
from mqcloud.alerts.models import AlertEvent
from mqcloud.engine_access import run_in_session


def watched_topics(now: datetime) -> list[Topic]:
    """Topics with a silence alert that are at least as old as their silence."""
    topics = Topic.objects.filter(silence_alert_minutes__gt=0).order_by("code")
    return [t for t in topics if t.created_at <= now - timedelta(minutes=t.silence_alert_minutes)]


def silent_topics(topics: list[Topic], now_ms: int) -> list[Topic]:
    """Those of ``topics`` with nothing produced in their last ``silence_alert_minutes``
    whole minutes nor in the current one (topics the engine does not know are left
    out)."""
    by_window: dict[int, list[Topic]] = {}
    for topic in topics:
        by_window.setdefault(topic.silence_alert_minutes, []).append(topic)

    async def read(engine) -> list[Topic]:
        known = engine.catalog.topics
        silent = []
        for minutes, group in sorted(by_window.items()):
            group = [t for t in group if t.code in known]
            rates = await engine.produce_rates(
                [t.code for t in group], minutes=minutes + 1, through_current=True, now_ms=now_ms
            )
            silent += [t for t in group if rates[t.code].produced == 0]
        return sorted(silent, key=lambda t: t.code)

    return run_in_session(read) if topics else []


def check_silence(now: datetime | None = None) -> list[AlertEvent]:
    """Fire an alert for every opted-in topic nothing was produced to for its silence."""
    now = now or datetime.now(UTC)
    silent = silent_topics(watched_topics(now), int(now.timestamp() * 1000))
    return fire_traffic_alerts(
        TrafficAlert(
            AlertEvent.Kind.TRAFFIC_SILENCE,
            topic,
            f"silence:{topic.code}",
            f"Traffic stopped on {topic.code}: nothing produced in"
            f" {topic.silence_alert_minutes} min",
            {"minutes": topic.silence_alert_minutes},
        )
        for topic in silent
    )
