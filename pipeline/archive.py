"""The archive job: every topic whose archive flag is on, streamed to Parquet.

Files go under ``ARCHIVE_URL`` (any Hadoop-compatible URL), partitioned by ``topic``,
``date`` (UTC, ``yyyy-MM-dd``) and ``hour``. The query's checkpoint holds the offsets
(per-partition indexes) of every micro-batch and the file sink's log holds the files of
every committed batch, so a job stopped at any point and started again writes each index
exactly once. Read the archive with ``spark.read.parquet(ARCHIVE_URL)``, which follows
that log.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

from brokers.engine import CatalogSnapshot
from pipeline.catalog import archived_topics, backlog, save_offsets, source_options

# The end offsets of the last batch the job saw committed (for its lag, on the console).
COMMIT_KEY = "mqcloud:{pipeline}:archive:committed"
PARTITION_COLUMNS = ("topic", "date", "hour")


@dataclass
class ArchiveResult:
    topics: list[str]
    batches: int = 0
    rows: int = 0
    lag: int | None = None
    last_batch: int = -1


def checkpoint_for(archive_url: str) -> str:
    """Default checkpoint location: beside the data, ignored by Parquet readers (``_``)."""
    return archive_url.rstrip("/") + "/_checkpoints/archive"


def archive_frame(spark: SparkSession, options: dict[str, str]) -> DataFrame:
    """The streaming frame the job writes: the source plus its partition columns."""
    stream = spark.readStream.format("mqcloud").options(**options).load()
    return stream.withColumn("date", F.date_format("store_time", "yyyy-MM-dd")).withColumn(
        "hour", F.hour("store_time")
    )


def run_archive(
    spark: SparkSession,
    snapshot: CatalogSnapshot,
    *,
    archive_url: str,
    checkpoint_url: str | None = None,
    once: bool = True,
    interval_s: float = 10.0,
    redis_url: str | None = None,
    split_size: int | None = None,
    progress: Callable[[str], None] = lambda line: None,
    on_batch: Callable[[ArchiveResult], None] = lambda result: None,
) -> ArchiveResult:
    """Archive the flagged topics: until caught up (``once``) or until interrupted.

    ``progress`` gets one line per micro-batch; ``on_batch`` the running totals.
    """
    topics = archived_topics(snapshot)
    result = ArchiveResult(topics)
    if not topics:
        progress("archive: no topic has its archive flag on")
        return result
    url = redis_url or None
    options = source_options(snapshot, topics, redis_url=url, split_size=split_size)
    writer = (
        archive_frame(spark, options)
        .writeStream.format("parquet")
        .queryName("mqcloud-archive")
        .option("path", archive_url)
        .option("checkpointLocation", checkpoint_url or checkpoint_for(archive_url))
        .partitionBy(*PARTITION_COLUMNS)
    )
    writer = (
        writer.trigger(availableNow=True)
        if once
        else writer.trigger(processingTime=f"{interval_s} seconds")
    )
    progress(f"archive: {', '.join(topics)} -> {archive_url}")
    query = writer.start()
    try:
        _follow(query, result, snapshot, options["redis_url"], progress, on_batch)
    except KeyboardInterrupt:
        query.stop()
        _collect(query, result, progress, options["redis_url"])
        raise
    _collect(query, result, progress, options["redis_url"])
    result.lag = backlog(snapshot, topics, COMMIT_KEY, options["redis_url"])
    return result


def _follow(
    query: StreamingQuery,
    result: ArchiveResult,
    snapshot: CatalogSnapshot,
    redis_url: str,
    progress: Callable[[str], None],
    on_batch: Callable[[ArchiveResult], None],
) -> None:
    while not query.awaitTermination(0.5):
        if _collect(query, result, progress, redis_url):
            result.lag = backlog(snapshot, result.topics, COMMIT_KEY, redis_url)
            on_batch(result)
    exc = query.exception()
    if exc is not None:
        raise RuntimeError(f"archive query failed: {exc}")


def _collect(
    query: StreamingQuery,
    result: ArchiveResult,
    progress: Callable[[str], None],
    redis_url: str,
) -> int:
    """Add up the micro-batches reported since the last call (a batch is reported once its
    files and offsets are committed) and remember the newest end offsets; how many were new."""
    new = 0
    for report in query.recentProgress:
        rows = int(report.numInputRows)
        if report.batchId <= result.last_batch or rows == 0:
            continue  # seen already, or an idle trigger's report
        result.last_batch = report.batchId
        result.batches += 1
        result.rows += rows
        new += 1
        end = json.loads(report.json)["sources"][0]["endOffset"]
        save_offsets(COMMIT_KEY, json.dumps(end, sort_keys=True), redis_url)
        rate = report.processedRowsPerSecond or 0.0
        progress(
            f"archive: batch {report.batchId}: {rows} rows ({rate:,.0f}/s), total {result.rows}"
        )
    return new
