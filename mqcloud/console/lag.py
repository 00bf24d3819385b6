"""Consumer lists with their lag, and topic lists with their produce rate.

One page of a list costs a fixed number of Redis round trips whatever its length: the
lags of all its consumers come from one batched engine call (``Engine.group_lags``), the
rates of all its topics from another. Sorting by name pages the queryset first and
measures only the page. Sorting by lag measures every consumer the caller may see (still
two round trips) while they are at most LIVE_SORT_LIMIT; past that — a fleet of
thousands — it orders by the lag the periodic backlog check recorded
(:class:`~mqcloud.alerts.models.LatestLag`, one indexed query) and measures only the page,
so no request measures thousands of consumers. :func:`consumer_page` is the one place that
pages, so the console list and the API list share it.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from django.db.models import F, QuerySet

from brokers.models import ConsumerPolicy, Topic
from mqcloud.console import engine_calls

SORTS = ("name", "-name", "lag", "-lag")
DEFAULT_SORT = "name"
RATE_MINUTES = 5
LIVE_SORT_LIMIT = 500


@dataclass(frozen=True)
class ConsumerLag:
    """A consumer with what the list shows of it."""

    consumer: ConsumerPolicy
    lag: int | None  # None: the engine did not answer, or the topic is not published
    oldest_unacked_age_ms: int | None
    lagging_partitions: int | None

    @property
    def state(self) -> str:
        return "paused" if self.consumer.paused else "running"


@dataclass(frozen=True)
class ConsumerPage:
    """One page of a consumer list: its rows, how many there are in all, any engine error."""

    rows: list[ConsumerLag]
    total: int
    error: str
    recorded: bool = False
    """Ordered by the lag the backlog check recorded (the rows show the live lag)."""


def measure(consumers: Sequence[ConsumerPolicy]) -> tuple[list[ConsumerLag], str]:
    """The lag of each consumer (one batched engine call); rows keep their order."""
    if not consumers:
        return [], ""
    groups = [(c.topic.code, c.app.code) for c in consumers]
    try:
        lags, error = engine_calls.group_lags(groups), ""
    except engine_calls.EngineUnavailable as exc:
        lags, error = {}, str(exc)
    now = int(time.time() * 1000)
    rows = []
    for consumer, group in zip(consumers, groups, strict=True):
        found = lags.get(group)
        rows.append(
            ConsumerLag(
                consumer,
                found.lag if found else None,
                found.oldest_age_ms(now) if found else None,
                found.lagging_partitions if found else None,
            )
        )
    return rows, error


def consumer_page(
    consumers: QuerySet[ConsumerPolicy], *, sort: str, offset: int, limit: int
) -> ConsumerPage:
    """Rows ``offset … offset+limit`` of ``consumers`` sorted by ``sort`` (one of SORTS;
    lag sorts put consumers whose lag is unknown last)."""
    if sort not in SORTS:
        raise ValueError(f"sort is one of {', '.join(SORTS)}")
    consumers = consumers.select_related("topic", "app", "app__team")
    if sort.endswith("name"):
        ordered = consumers.order_by(sort)
        total = ordered.count()
        rows, error = measure(list(ordered[offset : offset + limit]))
        return ConsumerPage(rows, total, error)
    total = consumers.count()
    if total > LIVE_SORT_LIMIT:
        ordered = by_recorded_lag(consumers, descending=sort.startswith("-"))
        rows, error = measure(list(ordered[offset : offset + limit]))
        return ConsumerPage(rows, total, error, recorded=True)
    rows, error = measure(list(consumers.order_by("name")))
    descending = sort.startswith("-")
    known = [r for r in rows if r.lag is not None]
    known.sort(key=lambda r: r.lag or 0, reverse=descending)
    ordered_rows = known + [r for r in rows if r.lag is None]
    return ConsumerPage(ordered_rows[offset : offset + limit], len(rows), error)


def by_recorded_lag(
    consumers: QuerySet[ConsumerPolicy], *, descending: bool = True
) -> QuerySet[ConsumerPolicy]:
    """``consumers`` ordered by their recorded lag (never measured ones last), then name."""
    recorded = F("latest_lag__lag")
    first = recorded.desc(nulls_last=True) if descending else recorded.asc(nulls_last=True)
    return consumers.order_by(first, "name")


def top_lagging(consumers: QuerySet[ConsumerPolicy], n: int) -> list[ConsumerPolicy]:
    """The ``n`` consumers with the largest recorded lag (one indexed query), each with
    ``latest_lag`` loaded; consumers without backlog are left out."""
    return list(
        consumers.filter(latest_lag__lag__gt=0)
        .select_related("latest_lag", "topic", "app", "app__team")
        .order_by("-latest_lag__lag", "name")[:n]
    )


@dataclass(frozen=True)
class TopicRateRow:
    """A topic with its produce rate over the last RATE_MINUTES whole minutes."""

    topic: Topic
    produced: int | None
    per_second: float | None


def with_rates(topics: Sequence[Topic]) -> tuple[list[TopicRateRow], str]:
    """Each topic's recent produce rate (one batched engine call for all of them)."""
    if not topics:
        return [], ""
    try:
        rates, error = engine_calls.produce_rates([t.code for t in topics], RATE_MINUTES), ""
    except engine_calls.EngineUnavailable as exc:
        rates, error = {}, str(exc)
    rows = []
    for topic in topics:
        rate = rates.get(topic.code)
        rows.append(
            TopicRateRow(topic, rate.produced if rate else None, rate.per_second if rate else None)
        )
    return rows, error
