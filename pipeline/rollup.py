"""The rollup job: per-minute traffic per topic, app and broker, and consumer lag history.

Traffic comes from the messages themselves (read with the ``mqcloud`` source over a
store-time window): messages, body bytes and produce→store latency p50/p99 per minute.
Each run recomputes whole minutes of its window and upserts them, so runs may overlap
and re-run freely. Lag is the engine's backlog of every clustering consumer, sampled
once per run into its minute. Rows older than 30 days are deleted.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass

from django.utils import timezone
from pyspark.sql import SparkSession

from brokers.engine import CatalogSnapshot
from pipeline.catalog import partition_brokers, source_options
from pipeline.models import RETENTION_DAYS, ConsumerLag, TrafficMinute
from pipeline.reading import StoreReader, run_sync

TRAFFIC_SQL = """
SELECT
  CASE WHEN grouping(topic) = 0 THEN 'topic' WHEN grouping(app) = 0 THEN 'app'
       ELSE 'broker' END AS dimension,
  CASE WHEN grouping(topic) = 0 THEN topic WHEN grouping(app) = 0 THEN app
       ELSE CAST(broker AS STRING) END AS name,
  unix_millis(minute) AS minute_ms,
  count(*) AS messages,
  sum(bytes) AS bytes,
  percentile_approx(latency, array(0.5, 0.99), 100000) AS latency
FROM mqcloud_rollup_base
GROUP BY GROUPING SETS ((topic, minute), (app, minute), (broker, minute))
"""


@dataclass
class RollupResult:
    traffic_rows: int = 0
    lag_rows: int = 0
    deleted: int = 0

    @property
    def rows(self) -> int:
        return self.traffic_rows + self.lag_rows


def _aware(ms: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC)


def traffic(
    spark: SparkSession,
    snapshot: CatalogSnapshot,
    since_ms: int,
    until_ms: int,
    redis_url: str | None = None,
) -> list[TrafficMinute]:
    """Per-minute traffic rows of the messages stored in ``[since_ms, until_ms)``."""
    topics = sorted(snapshot.topics)
    if not topics:
        return []
    options = source_options(
        snapshot, topics, redis_url=redis_url, from_ms=since_ms, to_ms=until_ms
    )
    messages = spark.read.format("mqcloud").options(**options).load()
    leaders = spark.createDataFrame(
        partition_brokers(snapshot) or [("", -1, -1)], "topic string, partition int, broker int"
    )
    messages.join(leaders, ["topic", "partition"], "left").selectExpr(
        "topic",
        "coalesce(app, '') AS app",
        "broker",
        "date_trunc('minute', store_time) AS minute",
        "coalesce(length(body), 0) AS bytes",
        "unix_millis(store_time) - unix_millis(send_time) AS latency",
    ).createOrReplaceTempView("mqcloud_rollup_base")
    rows = []
    for r in spark.sql(TRAFFIC_SQL).collect():
        if r["name"] is None:  # partitions without a leader have no broker
            continue
        rows.append(
            TrafficMinute(
                dimension=r["dimension"],
                name=r["name"],
                minute=_aware(r["minute_ms"]),
                messages=r["messages"],
                bytes=r["bytes"],
                latency_p50_ms=r["latency"][0],
                latency_p99_ms=r["latency"][1],
            )
        )
    return rows


LAG_CHUNK = 500
"""Consumers measured per batched engine call (a fixed number of Redis round trips)."""


def consumer_lag(
    snapshot: CatalogSnapshot, now_ms: int, redis_url: str | None = None
) -> list[ConsumerLag]:
    """The backlog of every consumer now, as the console's lists show it: a broadcast
    consumer's or fan-out queue's is its slowest client's (``Engine.group_lags``, a fixed
    number of round trips per LAG_CHUNK consumers, not one per consumer)."""
    from django.conf import settings

    pairs = sorted({(c.topic, c.app) for c in snapshot.consumers if c.topic in snapshot.topics})
    minute = _aware(now_ms - now_ms % 60_000)

    async def sample(reader: StoreReader) -> list[ConsumerLag]:
        out = []
        for start in range(0, len(pairs), LAG_CHUNK):
            chunk = pairs[start : start + LAG_CHUNK]
            lags = await reader.engine.group_lags(chunk)
            out.extend(
                ConsumerLag(topic=t, app=a, minute=minute, lag=lags[(t, a)].lag)
                for t, a in chunk
                if (t, a) in lags
            )
        return out

    return run_sync(redis_url or settings.REDIS_URL, snapshot, sample) if pairs else []


def sample_lag(snapshot: CatalogSnapshot, now_ms: int, redis_url: str | None = None) -> int:
    """Store every consumer's lag now in its minute (Redis reads, no Spark);
    how many samples."""
    lags = consumer_lag(snapshot, now_ms, redis_url)
    ConsumerLag.objects.bulk_create(
        lags, update_conflicts=True, unique_fields=["topic", "app", "minute"], update_fields=["lag"]
    )
    return len(lags)


def store_marks(snapshot: CatalogSnapshot, redis_url: str | None = None) -> dict[str, int]:
    """The next index of every partition (``topic/partition``): equal marks mean nothing
    was appended in between (one small Redis read per partition)."""
    from django.conf import settings

    async def measure(reader: StoreReader) -> dict[str, int]:
        marks = {}
        for code, info in sorted(snapshot.topics.items()):
            for p, (_lo, hi) in (await reader.bounds(code, info.partitions)).items():
                marks[f"{code}/{p}"] = hi
        return marks

    return run_sync(redis_url or settings.REDIS_URL, snapshot, measure)


def run_rollup(
    spark: SparkSession,
    snapshot: CatalogSnapshot,
    *,
    since_ms: int | None = None,
    until_ms: int | None = None,
    window_minutes: int = 10,
    redis_url: str | None = None,
    progress: Callable[[str], None] = lambda line: None,
) -> RollupResult:
    """Roll up ``[since, until)`` (default: the last ``window_minutes`` whole minutes up
    to now, the current minute included) and sample consumer lag."""
    now_ms = int(timezone.now().timestamp() * 1000)
    until = until_ms if until_ms is not None else now_ms
    since = since_ms if since_ms is not None else until - until % 60_000 - window_minutes * 60_000
    since -= since % 60_000  # whole minutes only: a partial minute would overwrite a full one
    result = RollupResult()
    progress(f"rollup: traffic from {_aware(since):%Y-%m-%d %H:%M} to {_aware(until):%H:%M:%S}")
    rows = traffic(spark, snapshot, since, until, redis_url)
    TrafficMinute.objects.bulk_create(
        rows,
        update_conflicts=True,
        unique_fields=["dimension", "name", "minute"],
        update_fields=["messages", "bytes", "latency_p50_ms", "latency_p99_ms"],
    )
    result.traffic_rows = len(rows)
    progress(f"rollup: {len(rows)} traffic rows")
    result.lag_rows = sample_lag(snapshot, now_ms, redis_url)
    progress(f"rollup: {result.lag_rows} consumer lag samples")
    cutoff = timezone.now() - dt.timedelta(days=RETENTION_DAYS)
    result.deleted = (
        TrafficMinute.objects.filter(minute__lt=cutoff).delete()[0]
        + ConsumerLag.objects.filter(minute__lt=cutoff).delete()[0]
    )
    return result
