"""Celery's per-run INFO lines of the tasks beat sends every few seconds stay out of the
logs; everything else Celery writes stays in (mqcloud/routine_logs.py)."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest
from django.conf import settings

from mqcloud.routine_logs import LOGGERS, RoutineTaskLines, routine_tasks

ROOT = Path(__file__).resolve().parents[2]
RELEASE = "mqcloud.tasks.release_delayed_messages"
RETENTION = "mqcloud.tasks.apply_retention"


def test_routine_tasks_are_the_ones_run_more_often_than_every_half_minute() -> None:
    assert routine_tasks(settings.CELERY_BEAT_SCHEDULE) == {
        RELEASE,
        "mqcloud.tasks.mark_silent_brokers_down",
        "mqcloud.tasks.rebalance_preferred_leaders_task",
    }
    schedule = {
        "seconds": {"task": "a", "schedule": 5},  # a number is seconds, as Celery reads it
        "slow": {"task": "b", "schedule": timedelta(minutes=1)},
        "crontab-like": {"task": "c", "schedule": object()},
        "no task": {"schedule": 1},
    }
    assert routine_tasks(schedule) == {"a"}


def test_the_filter_drops_only_routine_info_lines(caplog: pytest.LogCaptureFixture) -> None:
    """The filter as Django's LOGGING puts it on Celery's loggers."""
    for name in LOGGERS:
        assert any(isinstance(f, RoutineTaskLines) for f in logging.getLogger(name).filters)
    beat, trace = logging.getLogger("celery.beat"), logging.getLogger("celery.app.trace")
    with caplog.at_level(logging.INFO):
        beat.info("Scheduler: Sending due task %s (%s)", "release-delayed-messages", RELEASE)
        beat.info("Scheduler: Sending due task %s (%s)", "retention", RETENTION)
        trace.info("Task %(name)s[%(id)s] succeeded in %(runtime)ss", {
            "name": RELEASE, "id": "1", "runtime": 0.01})  # fmt: skip
        trace.info("Task %(name)s[%(id)s] succeeded in %(runtime)ss", {
            "name": RETENTION, "id": "2", "runtime": 0.01})  # fmt: skip
        trace.error("Task %s[%s] raised unexpected: boom", RELEASE, "3")
        trace.info("an unrelated line mentioning %s without brackets", RELEASE)
    kept = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert kept == [
        ("INFO", f"Scheduler: Sending due task retention ({RETENTION})"),
        ("INFO", f"Task {RETENTION}[2] succeeded in 0.01s"),
        ("ERROR", f"Task {RELEASE}[3] raised unexpected: boom"),
        ("INFO", f"an unrelated line mentioning {RELEASE} without brackets"),
    ]
    malformed = logging.LogRecord("celery.app.trace", logging.INFO, "", 0, "%s %s", ("a",), None)
    assert RoutineTaskLines([RELEASE]).filter(malformed)  # the handler reports it, not us


def test_a_real_worker_with_beat_keeps_its_log_for_what_matters(tmp_path: Path) -> None:
    """A worker with beat for a few seconds: release-delayed-messages ran every second
    without a line, the retention task sent to it still has its own, and the worker's
    own lines are there."""
    redis_url = os.environ["REDIS_URL"].rsplit("/", 1)[0] + "/14"  # no other test's tasks
    env = {**os.environ, "CELERY_BROKER_URL": redis_url, "CELERY_RESULT_BACKEND": redis_url}
    log_path = tmp_path / "worker.log"
    with log_path.open("wb") as log:
        worker = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "mqcloud", "worker", "--beat",
             "--pool", "solo", "--loglevel", "INFO", "--without-mingle", "--without-gossip",
             "--without-heartbeat", "--schedule", str(tmp_path / "celerybeat-schedule")],
            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while " ready." not in log_path.read_text():
            assert worker.poll() is None, log_path.read_text()[-3000:]
            assert time.monotonic() < deadline, "the worker never became ready"
            time.sleep(0.2)
        subprocess.run(
            [sys.executable, "-m", "celery", "-A", "mqcloud", "call", RETENTION],
            cwd=ROOT, env=env, check=True, capture_output=True, timeout=60,
        )  # fmt: skip
        while (
            f"{RETENTION}[" not in log_path.read_text() or "succeeded" not in log_path.read_text()
        ):
            assert time.monotonic() < deadline, log_path.read_text()[-3000:]
            time.sleep(0.2)
        time.sleep(3)  # release-delayed-messages runs every second meanwhile
    finally:
        worker.terminate()
        worker.wait(timeout=30)
    output = log_path.read_text()
    assert f"Task {RETENTION}[" in output and "received" in output
    assert f"{RELEASE}[" not in output and f"({RELEASE})" not in output, output[-3000:]
    assert f"({RETENTION})" not in output  # beat did not send it: the worker got it by call
    assert "Traceback" not in output, output[-3000:]
