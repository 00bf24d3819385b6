"""The archive job: every topic whose archive flag is on, streamed to Parquet.

Files go under ``ARCHIVE_URL`` (any Hadoop-compatible URL), partitioned by ``topic``,
``date`` (UTC, ``yyyy-MM-dd``) and ``hour``. The query's checkpoint holds the offsets
(per-partition indexes) of every micro-batch and the file sink's log holds the files of
every committed batch, so a job stopped at any point and started again writes each index
exactly once. Read the archive with ``spark.read.parquet(ARCHIVE_URL)``, which follows
that log.

The topics follow the catalog the console publishes (the source's ``follow=archive``,
:mod:`pipeline.stream`): a topic turned on joins at the next trigger, one turned off
stops, without a restart. A ``once`` run uses Trigger.AvailableNow: it archives what was
stored when it started, in micro-batches of at most ``max_rows_per_batch``, and stops.
(Benchmarks and tests may pass a fixed snapshot instead of following the catalog.)
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

from brokers.engine import CatalogSnapshot
from pipeline.catalog import archived_topics, source_options
from pipeline.options import FOLLOW_ARCHIVE
from pipeline.status import archive_status, save_committed, total_lag

PARTITION_COLUMNS = ("topic", "date", "hour")
DEFAULT_MAX_ROWS = 1_000_000  # a micro-batch after a long stop stays bounded
Offsets = dict[str, dict[str, int]]


@dataclass
class ArchiveResult:
    topics: list[str]
    batches: int = 0
    rows: int = 0
    lag: int | None = None
    last_batch: int = -1
    archived: Offsets = field(default_factory=dict)  # end offsets of the last batch


def checkpoint_for(archive_url: str) -> str:
    """Default checkpoint location: beside the data, ignored by Parquet readers (``_``)."""
    return archive_url.rstrip("/") + "/_checkpoints/archive"


def archive_frame(spark: SparkSession, options: dict[str, str]) -> DataFrame:
    """The streaming frame the job writes: the source plus its partition columns."""
    stream = spark.readStream.format("mqcloud").options(**options).load()
    return stream.withColumn("date", F.date_format("store_time", "yyyy-MM-dd")).withColumn(
        "hour", F.hour("store_time")
    )


class _Archive:
    """One run: the query, its running totals and the lag it reports."""

    def __init__(
        self,
        snapshot: CatalogSnapshot | None,
        redis_url: str,
        progress: Callable[[str], None],
        on_batch: Callable[[ArchiveResult], None],
    ) -> None:
        self.snapshot, self.redis_url = snapshot, redis_url
        self.progress, self.on_batch = progress, on_batch
        self.result = ArchiveResult(self.topics())

    def topics(self) -> list[str]:
        if self.snapshot is not None:
            return archived_topics(self.snapshot)
        return [s.topic for s in archive_status(self.redis_url) if s.archive]

    def measure(self) -> None:
        """The lag of every topic whose archive is on (in a fixed snapshot: its topics)."""
        statuses = [s for s in archive_status(self.redis_url, self.snapshot) if s.archive]
        self.result.topics = [s.topic for s in statuses]
        self.result.lag = total_lag(statuses)

    def collect(self, query: StreamingQuery) -> int:
        """Add up the micro-batches reported since the last call (a batch is reported once
        its files and offsets are committed) and remember the newest end offsets; how
        many were new."""
        new = 0
        result = self.result
        for report in query.recentProgress:
            rows = int(report.numInputRows)
            if report.batchId <= result.last_batch or rows == 0:
                continue  # seen already, or an idle trigger's report
            result.last_batch = report.batchId
            result.batches += 1
            result.rows += rows
            new += 1
            end = json.loads(report.json)["sources"][0]["endOffset"]
            result.archived = json.loads(end) if isinstance(end, str) else end
            save_committed(result.archived, self.redis_url)
            rate = report.processedRowsPerSecond or 0.0
            self.progress(
                f"archive: batch {report.batchId}: {rows} rows ({rate:,.0f}/s), total {result.rows}"
            )
        return new

    def follow(self, query: StreamingQuery, every_s: float, tick: Callable[[], None]) -> None:
        """Until the query ends: totals after each batch, the lag after each batch and at
        least every ``every_s`` (a topic turned on shows its backlog before it is read),
        and ``tick`` between polls."""
        measured = time.monotonic()
        while not query.awaitTermination(0.5):
            now = time.monotonic()
            if self.collect(query) or now - measured >= every_s:
                self.measure()
                self.on_batch(self.result)
                measured = now
            tick()
        exc = query.exception()
        if exc is not None:
            raise RuntimeError(f"archive query failed: {exc}")


def run_archive(
    spark: SparkSession,
    snapshot: CatalogSnapshot | None,
    *,
    archive_url: str,
    checkpoint_url: str | None = None,
    once: bool = True,
    interval_s: float = 10.0,
    redis_url: str | None = None,
    split_size: int | None = None,
    max_rows_per_batch: int | None = DEFAULT_MAX_ROWS,
    progress: Callable[[str], None] = lambda line: None,
    on_batch: Callable[[ArchiveResult], None] = lambda result: None,
    tick: Callable[[], None] = lambda: None,
) -> ArchiveResult:
    """Archive the flagged topics: until caught up with what was there at the start
    (``once``) or until interrupted. ``snapshot`` None follows the published catalog.

    ``progress`` gets one line per micro-batch; ``on_batch`` the running totals (also
    every ``interval_s`` while idle); ``tick`` runs between polls of a continuous run
    (the long-lived pipeline schedules its rollups there).
    """
    extra = {"split_size": split_size, "max_rows_per_batch": max_rows_per_batch}
    if snapshot is None:
        options = source_options(CatalogSnapshot(), [], redis_url=redis_url, **extra)
        options.update(follow=FOLLOW_ARCHIVE)
        del options["catalog"], options["topics"]
    else:
        topics = archived_topics(snapshot)
        options = source_options(snapshot, topics, redis_url=redis_url, **extra)
    run = _Archive(snapshot, options["redis_url"], progress, on_batch)
    if once and not run.result.topics:
        progress("archive: no topic has its archive flag on")
        run.measure()
        return run.result
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
    following = "the catalog's archived topics" if snapshot is None else "a fixed snapshot"
    progress(f"archive: {', '.join(run.result.topics) or 'no topic yet'} ({following})"
             f" -> {archive_url}")  # fmt: skip
    query = writer.start()
    try:
        run.follow(query, interval_s, tick if not once else lambda: None)
    except KeyboardInterrupt:
        query.stop()
        run.collect(query)
        raise
    run.collect(query)
    run.measure()
    return run.result
