"""Archive searches for real: the console queues the trace task, a Celery worker runs
``pipeline trace --json`` in a subprocess (Spark included) and the rows land in the
database; plus ``--json`` itself and the task's failures."""

from __future__ import annotations

import base64
import datetime as dt
import io
import os
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest
from django.core.management import call_command
from django.test import Client

from brokers.models import Team
from pipeline import jobs, tasks
from pipeline.management.commands.pipeline import Command as PipelineCommand
from pipeline.management.commands.pipeline import when
from pipeline.models import JobRun, TraceSearch
from tests import factories
from tests.httpmq.conftest import session_database_url
from tests.pipeline.test_trace import at, put, trim_to

ROOT = Path(__file__).resolve().parents[2]
WAIT_S = 180
# short-lived JVMs (this module's Spark, the worker's trace) start faster this way
FAST_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


@pytest.fixture(scope="module", autouse=True)
def fast_jvm():
    """Set before the module's SparkSession starts (if this module starts the JVM)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("JAVA_TOOL_OPTIONS", FAST_JVM)
        yield


@pytest.fixture
def worker_env(archive_dir, monkeypatch) -> None:
    """What a worker (and the trace it starts) reads: this test's database and archive."""
    monkeypatch.setenv("DATABASE_URL", session_database_url())
    monkeypatch.setenv("ARCHIVE_URL", archive_dir)
    monkeypatch.setenv("SPARK_MASTER", "local[1]")


@pytest.fixture
def worker(store, worker_env, tmp_path):
    """A real Celery worker (started after the store's Redis flush)."""
    log = (tmp_path / "worker.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "mqcloud", "worker", "--pool", "solo",
         "--loglevel", "INFO", "--without-mingle", "--without-gossip", "--without-heartbeat"],
        cwd=ROOT, env=dict(os.environ), stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    yield proc
    proc.terminate()
    proc.wait(timeout=30)
    log.close()


@pytest.mark.django_db(transaction=True)
def test_the_console_search_runs_on_a_worker_and_finds_both_ranges(
    spark, catalog, store, archive_dir, worker
):
    put(store, at(0), "X", b"first")  # archived, then trimmed from the store
    put(store, at(1), "Y", b"other")
    jobs.archive(once=True, spark=spark)
    put(store, at(2), "X", b"\x00\x01binary")  # live only
    trim_to(store, catalog, 2)
    member = factories.user("ann", team=Team.objects.get(name="t1"))
    outsider = factories.user("zed", team=Team.objects.create(name="t2"))
    client = Client()
    client.force_login(member)

    response = client.post("/pipeline/trace/", {"topic": "orders", "business_id": "X"})
    assert response.status_code == 302, response.content.decode()
    url = response["Location"]
    deadline = time.monotonic() + WAIT_S
    while True:
        partial = client.get(url, HTTP_HX_REQUEST="true").content.decode()
        if 'data-status="ok"' in partial or 'data-status="failed"' in partial:
            break
        assert 'data-status="pending"' in partial or 'data-status="running"' in partial
        assert worker.poll() is None, "the worker died"
        assert time.monotonic() < deadline, "the worker did not finish the search"
        time.sleep(0.5)

    search = TraceSearch.objects.get()
    assert search.status == TraceSearch.Status.OK, search.error
    found = [
        (r["partition"], r["index"], r["in_archive"], r["in_live"], r["body_base64"])
        for r in search.rows
    ]
    assert found == [
        (0, 0, True, False, base64.b64encode(b"first").decode()),
        (0, 2, False, True, base64.b64encode(b"\x00\x01binary").decode()),
    ]
    assert search.rows[0]["store_time"] == "2026-11-20T23:59:30.000Z"
    assert search.rows[0]["business_id"] == "X" and search.rows[0]["app"] == "shop"
    assert search.finished is not None
    assert "2 messages" in partial and '<code class="body">first</code>' in partial
    assert '<code class="body">00 01 62 69 6e 61 72 79</code> <small>(hex)</small>' in partial
    # the subprocess recorded its run for the pipeline page
    last = JobRun.last("trace")
    assert (last.status, last.rows, last.detail) == ("ok", 2, "orders id=X")

    client.force_login(outsider)
    assert client.get(url).status_code == 404


def test_trace_json_output(spark, catalog, store, archive_dir):
    put(store, at(0), "X", b"first body")
    jobs.archive(once=True, spark=spark)
    put(store, at(1), "X", "ünïcode".encode())
    put(store, at(2), "Y", b"not this one")
    out = io.StringIO()
    call_command(
        "pipeline", "trace", "--topic", "orders", "--business-id", "X",
        "--json", "--max-body", "5", "--to", str(int(at(1.5).timestamp() * 1000)), stdout=out,
    )  # fmt: skip
    doc = orjson.loads(out.getvalue())
    assert (doc["topic"], doc["id"], doc["count"]) == ("orders", "X", 2)
    first, second = doc["rows"]
    assert (first["partition"], first["index"], first["in_archive"], first["in_live"]) == (
        0, 0, True, True,
    )  # fmt: skip
    assert (second["index"], second["in_archive"], second["in_live"]) == (1, False, True)
    assert first["size"] == 10 and first["body_truncated"] is True
    assert base64.b64decode(first["body_base64"]) == b"first"
    assert second["size"] == len("ünïcode".encode()) and second["body_truncated"] is True
    assert base64.b64decode(second["body_base64"]) == "ünïcode".encode()[:5]
    assert (first["business_id"], first["app"], first["attributes"]) == ("X", "shop", {})
    assert second["store_ms"] == int(at(1).timestamp() * 1000)
    assert second["send_time"] == "2026-11-21T00:00:30.000Z"


@pytest.mark.django_db(transaction=True)
def test_the_task_stores_the_commands_error(catalog, worker_env):
    """A topic deleted after the search was asked: the trace fails before starting Spark."""
    gone = TraceSearch.objects.create(topic="deleted-topic", business_id="X")
    assert tasks.trace(gone.pk) == TraceSearch.Status.FAILED
    gone.refresh_from_db()
    assert gone.error == "CommandError: topic deleted-topic does not exist"
    assert gone.rows == [] and gone.finished is not None
    # a search already taken (or gone) is left alone
    assert tasks.trace(gone.pk) is None
    assert tasks.trace(gone.pk + 1000) is None


def test_trace_command_line_keeps_values_that_look_like_options(db):
    search = TraceSearch(
        topic="-orders",
        business_id="--json",
        start=dt.datetime(2026, 11, 20, 0, 0, 0, 250000, tzinfo=dt.UTC),
        end=dt.datetime(2026, 11, 21, tzinfo=dt.UTC),
    )
    cmd = tasks.trace_command(search)
    assert cmd[1:4] == ["manage.py", "pipeline", "trace"]
    parsed = PipelineCommand().create_parser("manage.py", "pipeline").parse_args(cmd[3:])
    assert (parsed.topic, parsed.id, parsed.json) == ("-orders", "--json", True)
    assert (parsed.limit, parsed.max_body) == (1000, 4096)
    assert when(parsed.start) == search.start and when(parsed.end) == search.end
