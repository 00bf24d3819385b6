"""Starting the jobs from Django: settings, catalog, SparkSession and run records.

The management command and the Celery task call these; tests call them too.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.db import close_old_connections, connection
from pyspark.sql import SparkSession

from pipeline.archive import DEFAULT_MAX_ROWS, ArchiveResult, run_archive
from pipeline.catalog import load_catalog, published_catalog
from pipeline.models import JobRun
from pipeline.rollup import RollupResult, run_rollup, sample_lag, store_marks
from pipeline.runs import recorded, report
from pipeline.schedule import RollupSchedule
from pipeline.session import spark_session
from pipeline.trace import trace

Progress = Callable[[str], None]


def _quiet(line: str) -> None:
    return None


def session(app_name: str) -> SparkSession:
    """The SparkSession on ``SPARK_MASTER``, its driver on ``SPARK_DRIVER_HOST``."""
    return spark_session(settings.SPARK_MASTER, app_name, driver_host=settings.SPARK_DRIVER_HOST)


def archive_url() -> str:
    return settings.ARCHIVE_URL


def checkpoint_url() -> str | None:
    return getattr(settings, "ARCHIVE_CHECKPOINT_URL", None)


def archive(
    *,
    once: bool = True,
    interval_s: float = 10.0,
    spark: SparkSession | None = None,
    progress: Progress = _quiet,
    max_rows_per_batch: int | None = DEFAULT_MAX_ROWS,
    rollups: Callable[[], object] | None = None,
) -> ArchiveResult:
    """Run the archive job over the published catalog's archived topics (followed live),
    recorded as a JobRun. A continuous run schedules the rollups in its session
    (``rollups``, by default every ``PIPELINE_ROLLUP_EVERY_MINUTES``)."""
    spark = spark or session("mqcloud-archive")
    published_catalog()  # the stream follows the published catalog: make sure there is one
    if rollups is None and not once:
        rollups = rollup_schedule(spark, progress)
    with recorded(JobRun.Job.ARCHIVE) as run:

        def on_batch(result: ArchiveResult) -> None:
            run.detail = _archive_detail(result)
            report(run, rows=result.rows, lag=result.lag, detail=run.detail)

        result = run_archive(
            spark,
            None,
            archive_url=archive_url(),
            checkpoint_url=checkpoint_url(),
            once=once,
            interval_s=interval_s,
            max_rows_per_batch=max_rows_per_batch,
            progress=progress,
            on_batch=on_batch,
            tick=rollups or (lambda: None),
        )
        run.rows, run.lag = result.rows, result.lag
        run.detail = _archive_detail(result)
    return result


def _archive_detail(result: ArchiveResult) -> str:
    return f"{result.batches} batches; topics: {', '.join(result.topics) or 'none'}"


def rollup_schedule(spark: SparkSession, progress: Progress = _quiet) -> RollupSchedule:
    """The rollups of a long-lived pipeline, run in ``spark`` (see pipeline.schedule)."""

    def run(since_ms: int | None, window_minutes: int) -> RollupResult:
        if not connection.in_atomic_block:  # a long-lived process: drop a bad connection
            close_old_connections()
        since = None if since_ms is None else dt.datetime.fromtimestamp(since_ms / 1000, dt.UTC)
        return rollup(since=since, window_minutes=window_minutes, spark=spark, progress=progress)

    return RollupSchedule(
        every_s=settings.PIPELINE_ROLLUP_EVERY_MINUTES * 60,
        window_minutes=10,
        catalog=load_catalog,
        marks=store_marks,
        rollup=run,
        sample_lag=sample_lag,
    )


def rollup(
    *,
    since: dt.datetime | None = None,
    until: dt.datetime | None = None,
    window_minutes: int = 10,
    spark: SparkSession | None = None,
    progress: Progress = _quiet,
) -> RollupResult:
    """Run the rollup job, recorded as a JobRun."""
    spark = spark or session("mqcloud-rollup")
    with recorded(JobRun.Job.ROLLUP) as run:
        result = run_rollup(
            spark,
            load_catalog(),
            since_ms=_ms(since),
            until_ms=_ms(until),
            window_minutes=window_minutes,
            progress=progress,
        )
        run.rows = result.rows
        run.detail = f"{result.traffic_rows} traffic rows, {result.lag_rows} lag samples"
    return result


def find_messages(
    topic: str,
    message_id: str,
    start: dt.datetime | None = None,
    end: dt.datetime | None = None,
    *,
    limit: int = 1000,
    spark: SparkSession | None = None,
) -> list[dict[str, Any]]:
    """Messages of ``topic`` that ``message_id`` names (any id a client saw: businessId,
    position, msgId, VibeMQ / zbus id) in the archive and the live store (the console's
    archive search runs this), recorded as a JobRun."""
    spark = spark or session("mqcloud-trace")
    with recorded(JobRun.Job.TRACE) as run:
        rows = trace(
            spark, load_catalog(), archive_url(), topic, message_id, start, end, limit=limit
        )
        run.rows = len(rows)
        run.detail = f"{topic} id={message_id}"
    return rows


def _ms(when: dt.datetime | None) -> int | None:
    return None if when is None else int(when.timestamp() * 1000)
