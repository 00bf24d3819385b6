"""Celery's per-run lines for tasks beat sends every few seconds, kept out of the logs.

For every run of a task the worker writes three INFO lines (beat's "Sending due task",
"Task … received", "Task … succeeded"). ``release-delayed-messages`` runs every second:
260,000 such lines a day, and the two ten-second tasks 52,000 more, burying what an
operator reads the log for. :class:`RoutineTaskLines` drops those INFO lines for the beat
entries scheduled more often than :data:`ROUTINE_EVERY`; a failure, a retry or anything
else at WARNING or above still shows, and so does every line of the other tasks.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from datetime import timedelta
from typing import Any

ROUTINE_EVERY = timedelta(seconds=30)
"""Beat entries run at least this often are routine."""
LOGGERS = ("celery.beat", "celery.worker.strategy", "celery.app.trace")
"""Where Celery writes the three lines (the filter goes on each)."""


def routine_tasks(schedule: Mapping[str, Mapping[str, Any]]) -> frozenset[str]:
    """The task names of the beat entries of ``schedule`` (``CELERY_BEAT_SCHEDULE``) run
    more often than :data:`ROUTINE_EVERY` (a number is seconds, as Celery reads it)."""
    names = set()
    for spec in schedule.values():
        every = spec.get("schedule")
        if isinstance(every, int | float):
            every = timedelta(seconds=every)
        task = spec.get("task")
        if isinstance(every, timedelta) and every < ROUTINE_EVERY and isinstance(task, str):
            names.add(task)
    return frozenset(names)


class RoutineTaskLines(logging.Filter):
    """Drops INFO (and lower) records that name one of ``tasks`` as Celery writes a task's
    name in its lines (``name[`` in received/succeeded, ``(name)`` in beat's)."""

    def __init__(self, tasks: Iterable[str] = ()) -> None:
        super().__init__()
        self.marks = tuple(mark for task in tasks for mark in (f"{task}[", f"({task})"))

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno > logging.INFO or not self.marks:
            return True
        try:
            message = record.getMessage()
        except Exception:  # a malformed record is the handler's to report, not ours
            return True
        return not any(mark in message for mark in self.marks)
