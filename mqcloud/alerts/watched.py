"""The consumers the per-consumer alerts watch, one number per consumer read from the
engine in batches, and alerting those over a threshold: what the dead-letter,
consume-failure and offset-move checks share."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

import redis
from asgiref.sync import async_to_sync
from django.conf import settings

from brokers.engine import Engine
from brokers.models import ConsumerPolicy
from mqcloud.alerts.backlog import LAG_BATCH
from mqcloud.alerts.delivery import alert_team, first_in_window
from mqcloud.alerts.models import AlertEvent
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


def alert_over(
    policies: list[ConsumerPolicy],
    counts: dict[str, int],
    *,
    kind: str,
    key: str,
    threshold: Callable[[ConsumerPolicy], int],
    describe: Callable[[ConsumerPolicy, int, int], tuple[str, dict]],
) -> list[AlertEvent]:
    """Alert the team of every consumer of ``policies`` whose count (by consumer name) is
    at least its ``threshold``, at most once per ALERT_THROTTLE_SECONDS per
    ``key:<consumer>``; ``describe(policy, count, threshold)`` gives the message and
    detail."""
    by_name = {p.name: p for p in policies}
    client = redis.Redis.from_url(settings.REDIS_URL)
    fired: list[AlertEvent] = []
    try:
        for name, count in sorted(counts.items()):
            policy = by_name[name]
            limit = threshold(policy)
            if count < limit or not first_in_window(client, f"{key}:{name}"):
                continue
            message, detail = describe(policy, count, limit)
            fired.append(alert_team(kind, f"consumer:{name}", policy.app.team, message, detail))
    finally:
        client.close()
    return fired
