"""Series from the pipeline's rollup tables (per-minute latency, consumer lag history).

The traffic counts of the charts come from the engine's live counters; what only the
rollup job computes — produce→store latency percentiles and the lag sampled every
minute — is read here from PostgreSQL, aligned on the same UTC minutes.
"""

from __future__ import annotations

from datetime import UTC, datetime

from pipeline.models import ConsumerLag, TrafficMinute


def minutes_of(start_ms: int, end_ms: int) -> list[int]:
    """The UTC minutes (epoch ms) that [start_ms, end_ms) touches, as every series aligns them."""
    return list(range(start_ms - start_ms % 60_000, end_ms, 60_000))


def _dt(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)


def latency(topic: str, start_ms: int, end_ms: int) -> dict[str, list[int | None]]:
    """p50/p99 produce→store latency (ms) per minute of ``topic``; None where not rolled up."""
    rows = {
        int(r.minute.timestamp() * 1000): r
        for r in TrafficMinute.objects.filter(
            dimension=TrafficMinute.Dimension.TOPIC,
            name=topic,
            minute__gte=_dt(start_ms - start_ms % 60_000),
            minute__lt=_dt(end_ms),
        )
    }
    minutes = minutes_of(start_ms, end_ms)
    return {
        "latency_p50": [rows[m].latency_p50_ms if m in rows else None for m in minutes],
        "latency_p99": [rows[m].latency_p99_ms if m in rows else None for m in minutes],
        "latency_samples": len(rows),
    }


def lag(topic: str, app: str, start_ms: int, end_ms: int) -> dict[str, list]:
    """The consumer's sampled lag per minute; None where the rollup has no sample."""
    rows = {
        int(r.minute.timestamp() * 1000): r.lag
        for r in ConsumerLag.objects.filter(
            topic=topic,
            app=app,
            minute__gte=_dt(start_ms - start_ms % 60_000),
            minute__lt=_dt(end_ms),
        )
    }
    minutes = minutes_of(start_ms, end_ms)
    return {
        "labels": [_dt(m).strftime("%H:%M") for m in minutes],
        "lag": [rows.get(m) for m in minutes],
        "samples": len(rows),
    }
