"""Celery task of the pipeline: the console's archive searches (``pipeline trace``).

A search runs in its own process (``manage.py pipeline trace …``) so neither the worker
nor the web process ever hosts a JVM. (Rollups are no Celery task: the long-lived
``pipeline archive`` runs them in its own Spark session, see :mod:`pipeline.schedule`.)
"""

from __future__ import annotations

import datetime as dt
import subprocess
import sys

from celery import shared_task
from django.utils import timezone

from pipeline.models import TRACE_BODY_BYTES, TRACE_KEEP_DAYS, TRACE_LIMIT, TraceSearch
from pipeline.session import PROJECT_ROOT
from pipeline.trace_json import parse_trace_json

TRACE_TIMEOUT_S = 600


def trace_command(search: TraceSearch) -> list[str]:
    """The ``manage.py pipeline trace … --json`` command line of ``search``."""
    cmd = [
        sys.executable,
        "manage.py",
        "pipeline",
        "trace",
        f"--topic={search.topic}",  # "=": a value may start with "-"
        f"--id={search.business_id}",  # the model's name for the id searched
        f"--limit={TRACE_LIMIT}",
        f"--max-body={TRACE_BODY_BYTES}",
        "--json",
    ]
    if search.start is not None:
        cmd.append(f"--from={int(search.start.timestamp() * 1000)}")
    if search.end is not None:
        cmd.append(f"--to={int(search.end.timestamp() * 1000)}")
    return cmd


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:2000] if lines else ""


@shared_task(name="pipeline.tasks.trace", ignore_result=True)
def trace(search_id: int) -> str | None:
    """Run a pending archive search and store its rows; its final status (None when the
    search is gone or another worker took it)."""
    taken = TraceSearch.objects.filter(pk=search_id, status=TraceSearch.Status.PENDING).update(
        status=TraceSearch.Status.RUNNING
    )
    if not taken:
        return None
    search = TraceSearch.objects.get(pk=search_id)
    try:
        done = subprocess.run(
            trace_command(search),
            cwd=PROJECT_ROOT,
            timeout=TRACE_TIMEOUT_S,
            check=False,
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            raise RuntimeError(_last_line(done.stderr) or f"the trace exited {done.returncode}")
        search.rows = parse_trace_json(done.stdout)["rows"][:TRACE_LIMIT]
        search.status = TraceSearch.Status.OK
    except subprocess.TimeoutExpired:
        search.status, search.error = TraceSearch.Status.FAILED, "the trace timed out"
    except (RuntimeError, ValueError) as exc:
        search.status, search.error = TraceSearch.Status.FAILED, str(exc)
    except Exception as exc:  # never leave a search "running" for the console to poll
        search.status, search.error = TraceSearch.Status.FAILED, f"{type(exc).__name__}: {exc}"
    search.finished = timezone.now()
    search.save(update_fields=["rows", "status", "error", "finished"])
    TraceSearch.objects.filter(
        created__lt=search.finished - dt.timedelta(days=TRACE_KEEP_DAYS)
    ).delete()
    return search.status
