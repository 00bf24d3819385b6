"""Lag-bytes alerts (the reference console's "consumer falling behind by more than
1 GiB"): a consumer whose unconsumed messages come to at least ``LAG_BYTES_ALERT_BYTES``
alerts its team — what a backlog count misses on a topic of large messages.

The store keeps no byte positions, so the size is an estimate: the consumer's lag (its
slowest client's, as the backlog check just measured it) times its topic's average
message size in the last hour of produce traffic, or the last day when the hour had
none (the engine's per-minute counters). Only consumers whose lag could come to the
threshold at the largest message the engine takes are estimated, so a fleet of small
lags costs no reads. Runs with the backlog check, every minute; the consumer's backlog
alert switch turns it off too; an alert key per consumer fires at most once per
ALERT_THROTTLE_SECONDS. ``LAG_BYTES_ALERT_BYTES`` at 0 turns it off.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import redis
from django.conf import settings

from brokers.engine import Engine
from brokers.models import ConsumerPolicy
from mqcloud.alerts.delivery import alert_team, first_in_window
from mqcloud.alerts.models import AlertEvent
from mqcloud.engine_access import run_in_session

HOUR_MS, DAY_MS = 3_600_000, 86_400_000


def human_bytes(n: float) -> str:
    """``n`` bytes in the largest binary unit that keeps it at least 1."""
    for unit in ("GiB", "MiB", "KiB"):
        size = {"GiB": 1024**3, "MiB": 1024**2, "KiB": 1024}[unit]
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n:.0f} bytes"


@dataclass(frozen=True)
class BytesBehind:
    """A consumer estimated at or over the threshold."""

    policy: ConsumerPolicy
    lag: int
    average_bytes: float

    @property
    def estimate(self) -> int:
        return int(self.lag * self.average_bytes)


async def average_sizes(engine: Engine, topics: Iterable[str]) -> dict[str, float]:
    """Each topic's average produced message size in the last hour, else the last day;
    topics with no produce in a day are left out."""
    now = engine.now_ms()
    out: dict[str, float] = {}
    for topic in topics:
        for span in (HOUR_MS, DAY_MS):
            minutes = await engine.traffic("topic", topic, now - span, now + 1)
            count = sum(m.produced for m in minutes)
            if count > 0:
                out[topic] = sum(m.produced_bytes for m in minutes) / count
                break
    return out


def bytes_behind(
    policies: Iterable[ConsumerPolicy], lags: Mapping[int, tuple[int, float | None]]
) -> list[BytesBehind]:
    """The consumers (with backlog alerts on) estimated at least ``LAG_BYTES_ALERT_BYTES``
    behind, from ``lags`` (consumer policy id → (lag, oldest age), the backlog check's)."""
    threshold = settings.LAG_BYTES_ALERT_BYTES
    if threshold <= 0:
        return []

    async def estimate(engine: Engine) -> list[BytesBehind]:
        candidates = [
            (p, lags[p.pk][0])
            for p in policies
            if p.backlog_alert_enabled
            and p.pk in lags
            and lags[p.pk][0] * engine.max_body >= threshold
        ]
        if not candidates:
            return []
        sizes = await average_sizes(engine, {p.topic.code for p, _ in candidates})
        found = [
            BytesBehind(p, lag, sizes[p.topic.code])
            for p, lag in candidates
            if p.topic.code in sizes
        ]
        return [b for b in found if b.estimate >= threshold]

    return run_in_session(estimate)


def check_lag_bytes(
    policies: Iterable[ConsumerPolicy], lags: Mapping[int, tuple[int, float | None]]
) -> list[AlertEvent]:
    """Alert the team of every consumer estimated too many bytes behind."""
    behind = bytes_behind(policies, lags)
    if not behind:
        return []
    client = redis.Redis.from_url(settings.REDIS_URL)
    fired: list[AlertEvent] = []
    try:
        for b in behind:
            name = b.policy.name
            if not first_in_window(client, f"lag-bytes:{name}"):
                continue
            fired.append(
                alert_team(
                    AlertEvent.Kind.LAG_BYTES,
                    f"consumer:{name}",
                    b.policy.app.team,
                    f"Consumer {name} is about {human_bytes(b.estimate)} behind: {b.lag:,}"
                    f" messages of {b.average_bytes:,.0f} bytes on average",
                    {
                        "lag": b.lag,
                        "average_bytes": round(b.average_bytes, 1),
                        "estimated_bytes": b.estimate,
                        "threshold_bytes": settings.LAG_BYTES_ALERT_BYTES,
                    },
                )
            )
    finally:
        client.close()
    return fired
