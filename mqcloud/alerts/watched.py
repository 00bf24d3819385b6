"""The consumers the per-consumer alerts watch, and one number per consumer read from the
engine in batches: what the dead-letter and consume-failure checks share."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

from asgiref.sync import async_to_sync

from brokers.engine import Engine
from brokers.models import ConsumerPolicy
from mqcloud.alerts.backlog import LAG_BATCH
from mqcloud.engine_access import engine_session

Measure = Callable[[Engine, Sequence[tuple[str, str]]], Awaitable[dict[tuple[str, str], int]]]
"""(engine, groups ``(topic, app)``) → a number per group (groups without one left out)."""


def watched_consumers() -> list[ConsumerPolicy]:
    """Every consumer with its alerts on (``backlog_alert_enabled``, the consumer's alert
    switch), with its topic and its app's team."""
    return list(
        ConsumerPolicy.objects.filter(backlog_alert_enabled=True).select_related(
            "topic", "app__team"
        )
    )


def per_consumer(policies: list[ConsumerPolicy], measure: Measure) -> dict[str, int]:
    """``measure`` of every consumer, by consumer name: LAG_BATCH groups per engine call."""

    async def run() -> dict[str, int]:
        found: dict[str, int] = {}
        async with engine_session() as engine:
            for start in range(0, len(policies), LAG_BATCH):
                batch = policies[start : start + LAG_BATCH]
                numbers = await measure(engine, [(p.topic.code, p.app.code) for p in batch])
                for p in batch:
                    n = numbers.get((p.topic.code, p.app.code))
                    if n is not None:
                        found[p.name] = n
        return found

    return async_to_sync(run)()
