"""``--once`` is Trigger.AvailableNow: it archives what was stored when it started, in
as many micro-batches as the cap makes, then stops; Spark no longer warns about it."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from pipeline import jobs
from pipeline.status import archive_status
from tests.httpmq.conftest import session_database_url
from tests.pipeline.conftest import archived_rows

ROOT = Path(__file__).resolve().parents[2]
WARNING = "does not support Trigger.AvailableNow"


def keys(rows) -> list[tuple[str, int, int]]:
    return sorted((r["topic"], r["partition"], r["index"]) for r in rows)


@pytest.mark.django_db
def test_once_stops_at_the_indexes_present_at_its_start(spark, store, archive_dir):
    expected = store.produce("orders", "shop", 3, 20)  # 60 messages, 10 per micro-batch
    started, stop = threading.Event(), threading.Event()
    produced: list[set] = []

    def keep_producing() -> None:
        """Append to orders from the first micro-batch on, until the run is over."""
        started.wait(120)
        n = 20
        while not stop.is_set() and n < 200:
            produced.append(store.produce("orders", "shop", 3, 1, start=n))
            n += 1

    producer = threading.Thread(target=keep_producing)
    producer.start()
    try:
        result = jobs.archive(
            once=True,
            spark=spark,
            max_rows_per_batch=10,
            progress=lambda line: "batch" in line and started.set(),
        )
        during = len(produced)  # appended while the run was going
    finally:
        started.set()
        stop.set()
        producer.join(60)
    assert during > 0, "nothing was produced while the run went on"
    assert result.batches >= 6  # several micro-batches, none past the start's end
    assert keys(archived_rows(spark, archive_dir)) == sorted(expected)
    orders = next(s for s in archive_status(store.redis_url) if s.topic == "orders")
    assert orders.archived_to == {0: 20, 1: 20, 2: 20}
    assert orders.lag == sum(len(s) for s in produced)  # all that came after the start
    assert 0 < result.lag <= orders.lag


@pytest.mark.django_db(transaction=True)  # the command runs in another process
def test_the_archive_command_logs_no_trigger_warning(store, archive_dir, tmp_path):
    expected = store.produce("audit", "shop", 2, 3)
    env = {
        **os.environ,
        "DATABASE_URL": session_database_url(),
        "REDIS_URL": store.redis_url,
        "ARCHIVE_URL": archive_dir,
        "SPARK_MASTER": "local[1]",
        "JAVA_TOOL_OPTIONS": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
    }
    done = subprocess.run(
        [sys.executable, "manage.py", "pipeline", "archive", "--once"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    log = done.stdout + done.stderr
    assert done.returncode == 0, log[-3000:]
    assert f"archive: {len(expected)} rows in 1 batches, lag 0" in done.stdout, log[-3000:]
    assert WARNING not in log
