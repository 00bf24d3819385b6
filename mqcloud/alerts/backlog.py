"""The backlog check: a consumer whose lag is at least its threshold AND whose oldest
unconsumed message is older than its age threshold (defaults 10,000 and 5 minutes) alerts.
Broadcast consumers are checked on count only, per registered client, and so are a
fan-out queue's consumers, per member (each VibeMQ FanOut subscriber has its progress). An alert key fires at
most once per ALERT_THROTTLE_SECONDS (Redis ``SET NX EX``, shared by all workers).

Every run measures every consumer policy — the clustering ones in batches of
LAG_BATCH groups, two Redis round trips each (``Engine.group_lags``); a consumer's
partitions are read one by one only when its lag already passes its threshold — and keeps
the lag it found in :class:`~mqcloud.alerts.models.LatestLag`, which the console's
dashboard and lag sorts read instead of measuring thousands of consumers per request.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

import redis
from asgiref.sync import async_to_sync
from django.conf import settings

from brokers.engine import Engine
from brokers.models import ConsumerPolicy
from mqcloud.alerts.delivery import deliver, first_in_window, team_emails
from mqcloud.alerts.models import AlertEvent, LatestLag
from mqcloud.engine_access import engine_session

LAG_BATCH = 500


@dataclass(frozen=True)
class Backlog:
    """A consumer (or one broadcast client) over its thresholds."""

    consumer: str
    client_id: str | None
    lag: int
    oldest_age_s: float | None


async def _backlog_of(
    engine: Engine, policy: ConsumerPolicy, client_id: str | None, now_ms: int
) -> Backlog | None:
    rows = await engine.progress(policy.topic.code, policy.app.code, client_id=client_id)
    lag = sum(max(r.lag, 0) for r in rows)
    if lag < policy.backlog_alert_count:
        return None
    if client_id is not None:  # broadcast: count only
        return Backlog(policy.name, client_id, lag, None)
    oldest: int | None = None
    for r in rows:
        if r.lag > 0:
            start = max(r.ack_index, r.min_index)
            first = await engine.read(policy.topic.code, r.partition, start, 1)
            if first:
                stored = first[0].message.store_time_ms
                oldest = stored if oldest is None else min(oldest, stored)
    if oldest is None:
        return None
    age = (now_ms - oldest) / 1000
    if age < policy.backlog_alert_age_s:
        return None
    return Backlog(policy.name, None, lag, age)


@dataclass
class Scan:
    """What one run found: backlogs over their thresholds, and every consumer's lag."""

    backlogs: list[Backlog] = field(default_factory=list)
    lags: dict[int, tuple[int, float | None]] = field(default_factory=dict)
    """Consumer policy id → (lag, oldest unacked age in s); the largest client's (member's)
    lag for broadcast consumers and fan-out queues."""


async def _find(policies: list[ConsumerPolicy]) -> Scan:
    found = Scan()
    async with engine_session() as engine:
        now = engine.now_ms()
        known = [p for p in policies if p.topic.code in engine.catalog.topics]
        clustering = [
            p for p in known if p.mode != ConsumerPolicy.Mode.BROADCAST and not p.fan_out_members
        ]
        for start in range(0, len(clustering), LAG_BATCH):
            batch = clustering[start : start + LAG_BATCH]
            lags = await engine.group_lags([(p.topic.code, p.app.code) for p in batch])
            for policy in batch:
                group = lags.get((policy.topic.code, policy.app.code))
                if group is None:
                    continue
                age_ms = group.oldest_age_ms(now)
                found.lags[policy.pk] = (group.lag, None if age_ms is None else age_ms / 1000)
                if policy.backlog_alert_enabled and group.lag >= policy.backlog_alert_count:
                    backlog = await _backlog_of(engine, policy, None, now)
                    if backlog:
                        found.backlogs.append(backlog)
        for policy in known:
            topic, app = policy.topic.code, policy.app.code
            if policy.mode == ConsumerPolicy.Mode.BROADCAST:
                clients = await engine.broadcast_clients(topic, app)
            elif policy.fan_out_members:
                clients = await engine.members(topic, app)
            else:
                continue
            worst = 0
            for client in clients:
                rows = await engine.progress(policy.topic.code, policy.app.code, client_id=client)
                worst = max(worst, sum(max(r.lag, 0) for r in rows))
                if policy.backlog_alert_enabled:
                    backlog = await _backlog_of(engine, policy, client, now)
                    if backlog:
                        found.backlogs.append(backlog)
            found.lags[policy.pk] = (worst, None)
    return found


def record_lags(lags: dict[int, tuple[int, float | None]]) -> None:
    """Keep each consumer's latest lag (one upsert per LAG_BATCH consumers)."""
    now = datetime.now(UTC)
    rows = [
        LatestLag(consumer_id=pk, lag=lag, oldest_age_s=age, measured_at=now)
        for pk, (lag, age) in lags.items()
    ]
    LatestLag.objects.bulk_create(
        rows,
        batch_size=LAG_BATCH,
        update_conflicts=True,
        unique_fields=["consumer"],
        update_fields=["lag", "oldest_age_s", "measured_at"],
    )


def check_backlogs() -> list[AlertEvent]:
    """Measure every consumer and record its lag; fire the new (unthrottled) alerts of
    those with backlog alerts on."""
    policies = list(ConsumerPolicy.objects.select_related("topic", "app__team"))
    scan = async_to_sync(_find)(policies)
    record_lags(scan.lags)
    backlogs = scan.backlogs
    by_name = {p.name: p for p in policies}
    client = redis.Redis.from_url(settings.REDIS_URL)
    fired: list[AlertEvent] = []
    try:
        for b in backlogs:
            if not first_in_window(client, f"backlog:{b.consumer}:{b.client_id or ''}"):
                continue
            policy = by_name[b.consumer]
            who = f"{b.consumer}" + (f" (client {b.client_id})" if b.client_id else "")
            age = f", oldest {b.oldest_age_s:.0f} s old" if b.oldest_age_s is not None else ""
            event = AlertEvent.objects.create(
                kind=AlertEvent.Kind.BACKLOG,
                target=f"consumer:{b.consumer}",
                team=policy.app.team,
                message=f"Backlog of {who}: {b.lag} messages{age}",
                detail={
                    "lag": b.lag,
                    "oldest_age_s": b.oldest_age_s,
                    "client_id": b.client_id,
                    "threshold": policy.backlog_alert_count,
                    "age_threshold_s": policy.backlog_alert_age_s,
                },
            )
            deliver(event, team_emails(policy.app.team))
            fired.append(event)
    finally:
        client.close()
    return fired
