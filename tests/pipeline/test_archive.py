"""The archive job end to end: engine → mqcloud source → Parquet, exactly once across restarts."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from django.db import connection

from pipeline import jobs
from pipeline.archive import checkpoint_for
from pipeline.models import JobRun
from tests.pipeline.conftest import archived_rows

pytestmark = pytest.mark.django_db


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
