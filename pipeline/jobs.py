"""Starting the jobs from Django: settings, catalog, SparkSession and run records.

The management command and the Celery task call these; tests call them too.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

from django.conf import settings
from pyspark.sql import SparkSession

from pipeline.archive import ArchiveResult, run_archive
from pipeline.catalog import load_catalog
from pipeline.models import JobRun
from pipeline.rollup import RollupResult, run_rollup
from pipeline.runs import recorded, report
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
) -> ArchiveResult:
    """Run the archive job on the current catalog, recorded as a JobRun."""
    spark = spark or session("mqcloud-archive")
    with recorded(JobRun.Job.ARCHIVE) as run:

        def on_batch(result: ArchiveResult) -> None:
            report(run, rows=result.rows, lag=result.lag)

        result = run_archive(
            spark,
            load_catalog(),
            archive_url=archive_url(),
            checkpoint_url=checkpoint_url(),
            once=once,
            interval_s=interval_s,
            progress=progress,
            on_batch=on_batch,
        )
        run.rows, run.lag = result.rows, result.lag
        run.detail = f"{result.batches} batches; topics: {', '.join(result.topics) or 'none'}"
    return result


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
    business_id: str,
    start: dt.datetime | None = None,
    end: dt.datetime | None = None,
    *,
    limit: int = 1000,
    spark: SparkSession | None = None,
) -> list[dict[str, Any]]:
    """Messages of ``topic`` with ``business_id`` in the archive and the live store (the
    console's message search calls this), recorded as a JobRun."""
    spark = spark or session("mqcloud-trace")
    with recorded(JobRun.Job.TRACE) as run:
        rows = trace(
            spark, load_catalog(), archive_url(), topic, business_id, start, end, limit=limit
        )
        run.rows = len(rows)
        run.detail = f"{topic} businessId={business_id}"
    return rows


def _ms(when: dt.datetime | None) -> int | None:
    return None if when is None else int(when.timestamp() * 1000)
