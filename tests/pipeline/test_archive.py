"""The archive job end to end: engine → mqcloud source → Parquet, exactly once across restarts."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from django.db import connection
from pyspark.errors import AnalysisException

from brokers.catalog_loader import publish
from brokers.models import ProducerPolicy
from pipeline import jobs
from pipeline.archive import checkpoint_for
from pipeline.models import JobRun
from pipeline.status import archive_status
from tests.pipeline.conftest import archived_rows

pytestmark = pytest.mark.django_db
INTERVAL_S = 1.0
JOIN_WITHIN_S = 60  # the claim is one trigger; the bound leaves room for a loaded machine


def keys(rows) -> list[tuple[str, int, int]]:
    return sorted((r["topic"], r["partition"], r["index"]) for r in rows)


def test_archive_once_then_again_is_exact(spark, store, archive_dir):
    expected = store.produce("orders", "shop", 3, 7)
    expected |= store.produce("audit", "shop", 2, 4)
    store.produce("clicks", "web", 2, 5)  # archive flag off: never archived

    lines: list[str] = []
    result = jobs.archive(once=True, spark=spark, progress=lines.append)
    assert result.topics == ["audit", "orders"]
    assert result.rows == len(expected) == 29
    assert result.lag == 0
    assert any("batch" in line for line in lines)
    rows = archived_rows(spark, archive_dir)
    assert keys(rows) == sorted(expected)  # exactly once: no index missing, none twice

    # content: the decoded message, partition columns from store time
    first = next(r for r in rows if (r["topic"], r["partition"], r["index"]) == ("orders", 1, 0))
    assert bytes(first["body"]) == b"orders-1-0"
    assert first["business_id"] == "biz-orders-1-0"
    assert first["attributes"] == {"n": "0"}
    assert first["app"] == "shop"
    assert first["date"] == first["store_time"].strftime("%Y-%m-%d")
    assert first["hour"] == str(first["store_time"].hour)
    assert Path(archive_dir, "topic=orders").is_dir()

    run = JobRun.last("archive")
    assert (run.status, run.rows, run.lag) == ("ok", 29, 0)

    expected |= store.produce("orders", "shop", 3, 5, start=7)
    again = jobs.archive(once=True, spark=spark)
    assert again.rows == 15
    assert keys(archived_rows(spark, archive_dir)) == sorted(expected)

    nothing = jobs.archive(once=True, spark=spark)  # caught up: no batch, nothing written
    assert nothing.rows == 0
    assert keys(archived_rows(spark, archive_dir)) == sorted(expected)


def test_crash_before_commit_replays_exactly(spark, store, archive_dir):
    """A batch whose files were written but whose commit was lost is replayed once."""
    expected = store.produce("orders", "shop", 3, 4)
    jobs.archive(once=True, spark=spark)
    expected |= store.produce("orders", "shop", 3, 3, start=4)
    jobs.archive(once=True, spark=spark)

    # As after a crash between the sink's write and the checkpoint's commit: the last
    # batch's offsets are logged but not committed, and (worse) its sink entry is gone.
    checkpoint = Path(checkpoint_for(archive_dir))
    last = max(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
    for log in (checkpoint / "commits", Path(archive_dir) / "_spark_metadata"):
        (log / str(last)).unlink()
        (log / f".{last}.crc").unlink(missing_ok=True)  # the local filesystem's checksum

    replay = jobs.archive(once=True, spark=spark)
    assert replay.rows == 9  # the same planned range, read again
    assert keys(archived_rows(spark, archive_dir)) == sorted(expected)


@pytest.mark.django_db(transaction=True)  # the job runs in a thread: its own connection
def test_continuous_stop_and_start_resumes(spark, store, archive_dir):
    expected = store.produce("audit", "shop", 2, 6)
    seen = threading.Event()
    outcome: dict = {}

    def on_batch_progress(line: str) -> None:
        if "batch" in line:
            seen.set()

    def run() -> None:
        try:
            outcome["result"] = jobs.archive(
                once=False, interval_s=0.5, spark=spark, progress=on_batch_progress
            )
        except BaseException as exc:  # surfaced below
            outcome["error"] = exc
        finally:
            connection.close()

    worker = threading.Thread(target=run)
    worker.start()
    try:
        assert seen.wait(60), outcome or "no micro-batch ran"
        expected |= store.produce("audit", "shop", 2, 3, start=6)  # mid-stream
    finally:
        for query in spark.streams.active:
            query.stop()  # stop the stream wherever it is
        worker.join(60)
    assert "error" not in outcome, outcome.get("error")
    assert JobRun.last("archive").status == "ok"
    expected |= store.produce("audit", "shop", 2, 2, start=9)

    jobs.archive(once=True, spark=spark)
    assert keys(archived_rows(spark, archive_dir)) == sorted(expected)


def set_archive(topic: str, on: bool) -> None:
    """Turn a topic's archive on or off as the console does (policy row, then publish)."""
    ProducerPolicy.objects.filter(topic__code=topic).update(archive=on)
    publish()


def topic_keys(spark, path: str, topic: str) -> list[tuple[str, int, int]]:
    try:
        frame = spark.read.parquet(path)
    except AnalysisException:  # nothing committed yet
        return []
    return keys(frame.where(frame.topic == topic).collect())


def next_trigger(query, after: int) -> int:
    """Wait for a trigger (idle or not) that started after the ``after``-th report."""
    deadline = time.monotonic() + 60
    while len(query.recentProgress) <= after + 1:
        assert time.monotonic() < deadline, "the stream stopped triggering"
        time.sleep(0.1)
    return len(query.recentProgress)


@pytest.mark.django_db(transaction=True)  # the job runs in a thread: its own connection
def test_the_running_stream_follows_the_catalog_exactly_once(spark, store, archive_dir):
    """A topic turned on joins the running stream within its interval, one turned off
    stops; across a stop and a crash every index is archived exactly once."""
    expected = store.produce("audit", "shop", 2, 3)
    expected_clicks = store.produce("clicks", "web", 2, 4)  # produced before it is turned on
    first_batch = threading.Event()
    outcome: dict = {}

    def run() -> None:
        try:
            outcome["result"] = jobs.archive(
                once=False,
                interval_s=INTERVAL_S,
                spark=spark,
                progress=lambda line: "batch" in line and first_batch.set(),
                rollups=lambda: None,
            )
        except BaseException as exc:  # surfaced below
            outcome["error"] = exc
        finally:
            connection.close()

    worker = threading.Thread(target=run)
    worker.start()
    try:
        assert first_batch.wait(120), outcome or "no micro-batch ran"
        query = spark.streams.active[0]
        assert topic_keys(spark, archive_dir, "clicks") == []

        set_archive("clicks", True)
        turned_on = time.monotonic()
        while topic_keys(spark, archive_dir, "clicks") != sorted(expected_clicks):
            assert time.monotonic() - turned_on < JOIN_WITHIN_S, "clicks never joined"
            time.sleep(0.2)
        joined_after = time.monotonic() - turned_on
        expected_clicks |= store.produce("clicks", "web", 2, 2, start=4)  # while it runs

        set_archive("audit", False)
        next_trigger(query, next_trigger(query, len(query.recentProgress)))
        held = store.produce("audit", "shop", 2, 2, start=3)  # archive off: not read now
        while topic_keys(spark, archive_dir, "clicks") != sorted(expected_clicks):
            assert time.monotonic() - turned_on < 2 * JOIN_WITHIN_S, "clicks stopped"
            time.sleep(0.2)
        next_trigger(query, len(query.recentProgress))
        assert topic_keys(spark, archive_dir, "audit") == sorted(expected)
    finally:
        for active in spark.streams.active:
            active.stop()  # stop the stream wherever it is
        worker.join(60)
    assert "error" not in outcome, outcome.get("error")
    assert joined_after < JOIN_WITHIN_S
    statuses = {s.topic: s for s in archive_status(store.redis_url)}
    assert statuses["audit"].archive is False and statuses["audit"].lag is None
    assert statuses["clicks"].archived_to == {0: 6, 1: 6} and statuses["clicks"].lag == 0

    # a crash after the last batch's files were written, before its commit: the batch is
    # replayed; audit, turned on again, resumes where it stopped
    checkpoint = Path(checkpoint_for(archive_dir))
    last = max(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
    for log in (checkpoint / "commits", Path(archive_dir) / "_spark_metadata"):
        (log / str(last)).unlink()
        (log / f".{last}.crc").unlink(missing_ok=True)
    set_archive("audit", True)
    jobs.archive(once=True, spark=spark)
    assert topic_keys(spark, archive_dir, "clicks") == sorted(expected_clicks)
    assert topic_keys(spark, archive_dir, "audit") == sorted(expected | held)
    assert JobRun.last("archive").lag == 0
