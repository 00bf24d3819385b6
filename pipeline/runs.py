"""Recording job runs (the console shows each job's last run, rows and lag) and progress."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TextIO

from django.utils import timezone

from pipeline.models import JobRun


@contextmanager
def recorded(job: str) -> Iterator[JobRun]:
    """A JobRun row for the body's duration: ``ok`` when it returns, ``failed`` with the
    error when it raises (KeyboardInterrupt ends a continuous run as ``ok``)."""
    run = JobRun.objects.create(job=job, started=timezone.now())
    try:
        yield run
    except KeyboardInterrupt:
        _finish(run, JobRun.Status.OK, "stopped")
        raise
    except BaseException as exc:
        _finish(run, JobRun.Status.FAILED, f"{type(exc).__name__}: {exc}"[:4000])
        raise
    else:
        _finish(run, JobRun.Status.OK, run.detail)


def _finish(run: JobRun, status: str, detail: str) -> None:
    run.status = status
    run.detail = detail
    run.finished = timezone.now()
    run.save(update_fields=["status", "detail", "finished", "rows", "lag"])


def report(
    run: JobRun, *, rows: int | None = None, lag: int | None = None, detail: str | None = None
) -> None:
    """Store a running job's counts (and what it is doing) so far."""
    if rows is not None:
        run.rows = rows
    if lag is not None:
        run.lag = lag
    if detail is not None:
        run.detail = detail
    run.save(update_fields=["rows", "lag", "detail"])


def printer(stream: TextIO | None = None) -> Callable[[str], None]:
    """A progress line writer for the terminal (flushed at once)."""
    out = stream or sys.stdout

    def emit(line: str) -> None:
        out.write(line + "\n")
        out.flush()

    return emit
