"""The backlog check: a consumer whose lag is at least its threshold AND whose oldest
unconsumed message is older than its age threshold (defaults 10,000 and 5 minutes) alerts.
Broadcast consumers are checked on count only, per client (its active ones: see
``Engine.client_lags``), and so are a fan-out queue's consumers, per member (each VibeMQ
FanOut subscriber has its progress). An alert key fires at most once per
ALERT_THROTTLE_SECONDS (Redis ``SET NX EX``, shared by all workers).

Every run measures every consumer policy, in batches of LAG_BATCH groups, a fixed number
of Redis round trips each whatever the number of clients and members
(``Engine.client_lags``), and keeps the lag it found — a broadcast or fan-out consumer's
slowest client's — in :class:`~mqcloud.alerts.models.LatestLag`, which the console's
dashboard and lag sorts read instead of measuring thousands of consumers per request.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

import redis
from asgiref.sync import async_to_sync
from django.conf import settings

from brokers.engine import GroupLag, worst_lag
from brokers.models import ConsumerPolicy
from mqcloud.alerts.delivery import alert_team, first_in_window
from mqcloud.alerts.lag_bytes import check_lag_bytes
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
        for start in range(0, len(known), LAG_BATCH):
            batch = known[start : start + LAG_BATCH]
            lags = await engine.client_lags([(p.topic.code, p.app.code) for p in batch])
            for policy in batch:
                clients = lags.get((policy.topic.code, policy.app.code))
                if clients:
                    _scan_consumer(found, policy, clients, now)
    return found


def _scan_consumer(
    found: Scan, policy: ConsumerPolicy, clients: dict[str | None, GroupLag], now_ms: int
) -> None:
    """Record ``policy``'s lag (its slowest client's) and the backlogs it alerts for."""
    worst: GroupLag | None = None
    for client_id, lag in clients.items():
        worst = lag if worst is None else worst_lag(worst, lag)
        if not policy.backlog_alert_enabled or lag.lag < policy.backlog_alert_count:
            continue
        if client_id is not None:  # a broadcast client or fan-out member: count only
            found.backlogs.append(Backlog(policy.name, client_id, lag.lag, None))
            continue
        age_ms = lag.oldest_age_ms(now_ms)
        if age_ms is not None and age_ms / 1000 >= policy.backlog_alert_age_s:
            found.backlogs.append(Backlog(policy.name, None, lag.lag, age_ms / 1000))
    if worst is not None:
        age_ms = worst.oldest_age_ms(now_ms)
        found.lags[policy.pk] = (worst.lag, None if age_ms is None else age_ms / 1000)


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
    """Measure every consumer and record its lag; fire the new (unthrottled) backlog and
    lag-bytes alerts (:mod:`.lag_bytes`) of those with backlog alerts on."""
    policies = list(ConsumerPolicy.objects.select_related("topic", "app__team"))
    scan = async_to_sync(_find)(policies)
    record_lags(scan.lags)
    fired = check_lag_bytes(policies, scan.lags)
    backlogs = scan.backlogs
    by_name = {p.name: p for p in policies}
    client = redis.Redis.from_url(settings.REDIS_URL)
    try:
        for b in backlogs:
            if not first_in_window(client, f"backlog:{b.consumer}:{b.client_id or ''}"):
                continue
            policy = by_name[b.consumer]
            who = f"{b.consumer}" + (f" (client {b.client_id})" if b.client_id else "")
            age = f", oldest {b.oldest_age_s:.0f} s old" if b.oldest_age_s is not None else ""
            event = alert_team(
                AlertEvent.Kind.BACKLOG,
                f"consumer:{b.consumer}",
                policy.app.team,
                f"Backlog of {who}: {b.lag} messages{age}",
                {
                    "lag": b.lag,
                    "oldest_age_s": b.oldest_age_s,
                    "client_id": b.client_id,
                    "threshold": policy.backlog_alert_count,
                    "age_threshold_s": policy.backlog_alert_age_s,
                },
            )
            fired.append(event)
    finally:
        client.close()
    return fired
