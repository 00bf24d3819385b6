"""The trace job: find a topic's messages by any id a client saw, in the archive and the
live store.

An id is a businessId, a position (JMQ4 ``partition:index``, HTTP-MQ ``msgId`` /
``offsetMsgId``) or the value of an id property (VibeMQ's message id, zbus's msgid): see
:mod:`pipeline.ids`. :func:`trace` is what the console's archive search runs; the
``pipeline trace`` command prints its rows. A message still in the store and already
archived appears once, with both ``in_archive`` and ``in_live`` set.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from pyspark.errors import AnalysisException
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from brokers.engine import DELAY_ID, CatalogSnapshot, TopicNotFound
from pipeline.catalog import source_options
from pipeline.ids import ID_PROPERTIES, MessageId, parse

FIELDS = (
    "topic",
    "partition",
    "index",
    "app",
    "business_id",
    "attributes",
    "body",
    "priority",
    "send_ms",
    "store_ms",
    "client_address",
)


def _ms(when: dt.datetime | None) -> int | None:
    if when is None:
        return None
    if when.tzinfo is None:
        raise ValueError("trace times must be timezone-aware")
    return int(when.timestamp() * 1000)


def is_message(mid: MessageId) -> Column:
    """The rows ``mid`` names: its businessId, an id property, or one of its positions."""
    keys = list(ID_PROPERTIES)
    cond = (F.col("business_id") == mid.text) | F.exists(
        F.map_entries("attributes"),
        lambda e: F.lower(e["key"]).isin(keys) & (e["value"] == F.lit(mid.text)),
    )
    for partition, index in mid.positions:
        cond = cond | ((F.col("partition") == partition) & (F.col("index") == index))
    if mid.delay_id is not None:
        cond = cond | F.exists(
            F.map_entries("attributes"),
            lambda e: (e["key"] == F.lit(DELAY_ID)) & (e["value"] == F.lit(str(mid.delay_id))),
        )
    return cond


def _select(
    frame: DataFrame, topic: str, mid: MessageId, lo: int | None, hi: int | None
) -> DataFrame:
    frame = frame.where((F.col("topic") == topic) & is_message(mid))
    if lo is not None:
        frame = frame.where(F.unix_millis("store_time") >= lo)
    if hi is not None:
        frame = frame.where(F.unix_millis("store_time") < hi)
    return frame.select(
        "topic", "partition", "index", "app", "business_id", "attributes", "body", "priority",
        F.unix_millis("send_time").alias("send_ms"), F.unix_millis("store_time").alias("store_ms"),
        "client_address",
    )  # fmt: skip


def archived(
    spark: SparkSession,
    archive_url: str,
    topic: str,
    mid: MessageId,
    lo: int | None = None,
    hi: int | None = None,
) -> DataFrame | None:
    """Matching rows of the Parquet archive (None when nothing was archived yet)."""
    try:
        frame = spark.read.parquet(archive_url)
    except AnalysisException as exc:
        if "PATH_NOT_FOUND" in str(exc) or "UNABLE_TO_INFER_SCHEMA" in str(exc):
            return None
        raise
    frame = frame.where(F.col("topic") == topic)
    if lo is not None:  # prune date partitions before the row filter
        frame = frame.where(F.col("date") >= F.lit(_day(lo)))
    if hi is not None:
        frame = frame.where(F.col("date") <= F.lit(_day(hi)))
    return _select(frame, topic, mid, lo, hi)


def live(
    spark: SparkSession,
    snapshot: CatalogSnapshot,
    topic: str,
    mid: MessageId,
    lo: int | None = None,
    hi: int | None = None,
    redis_url: str | None = None,
) -> DataFrame:
    """Matching rows still in the store (the read narrows to ``[lo, hi)`` by store time)."""
    options = source_options(snapshot, [topic], redis_url=redis_url, from_ms=lo, to_ms=hi)
    frame = spark.read.format("mqcloud").options(**options).load()
    return _select(frame, topic, mid, lo, hi)


def _day(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC).strftime("%Y-%m-%d")


def trace(
    spark: SparkSession,
    snapshot: CatalogSnapshot,
    archive_url: str,
    topic: str,
    message_id: str,
    start: dt.datetime | None = None,
    end: dt.datetime | None = None,
    *,
    redis_url: str | None = None,
    limit: int = 1000,
) -> list[dict[str, Any]]:
    """Messages of ``topic`` that ``message_id`` names (see :mod:`pipeline.ids`) stored in
    ``[start, end)``, oldest first.

    Each row has the source columns (times as aware datetimes ``send_time``/``store_time``)
    plus ``in_archive`` and ``in_live``; at most ``limit`` rows.
    """
    if topic not in snapshot.topics:
        raise TopicNotFound(f"topic {topic} does not exist")
    mid = parse(topic, message_id)
    lo, hi = _ms(start), _ms(end)
    found: dict[tuple[int, int], dict[str, Any]] = {}
    parts = [("in_live", live(spark, snapshot, topic, mid, lo, hi, redis_url))]
    old = archived(spark, archive_url, topic, mid, lo, hi)
    if old is not None:
        parts.append(("in_archive", old))
    for flag, frame in parts:
        for r in frame.orderBy("store_ms", "partition", "index").limit(limit).collect():
            key = (r["partition"], r["index"])
            row = found.get(key)
            if row is None:
                row = found[key] = _row(r)
            row[flag] = True
    rows = sorted(found.values(), key=lambda r: (r["store_time"], r["partition"], r["index"]))
    return rows[:limit]


def _row(r: Any) -> dict[str, Any]:
    out = {name: r[name] for name in FIELDS if name not in ("send_ms", "store_ms")}
    out["attributes"] = dict(out["attributes"] or {})
    out["body"] = bytes(out["body"]) if out["body"] is not None else None
    out["send_time"] = dt.datetime.fromtimestamp(r["send_ms"] / 1000, tz=dt.UTC)
    out["store_time"] = dt.datetime.fromtimestamp(r["store_ms"] / 1000, tz=dt.UTC)
    out["in_archive"] = False
    out["in_live"] = False
    return out
