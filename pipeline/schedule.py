"""Rollups inside the long-lived pipeline: scheduled in the archive's own Spark session.

Before, Celery beat started ``manage.py pipeline rollup`` every few minutes: a new JVM
and Spark application each time (about 32 s of a core on the 2-core development machine),
even when nothing had been produced. Now the continuous ``pipeline archive`` calls
:class:`RollupSchedule` between its polls. Every ``every_s`` it reads the store's marks
(the next index of every partition, one small Redis read each):

* nothing appended since the last rollup: no Spark job at all; only the consumers' lag is
  sampled (Redis reads) so the lag history keeps its points;
* something appended: one Spark job in the session already running, over the whole
  minutes since the last rollup (one minute of slack for late store times), at most
  ``window_minutes`` back.

A rollup that fails is logged and retried at the next tick; the archive goes on.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from brokers.engine import CatalogSnapshot

log = logging.getLogger(__name__)

SLACK_MS = 60_000


@dataclass
class Tick:
    """What one due tick did."""

    ran: bool  # a Spark rollup ran
    since_ms: int | None = None
    lag_samples: int = 0


class RollupSchedule:
    """Call it often; it rolls up when due and something changed (see the module)."""

    def __init__(
        self,
        *,
        every_s: float,
        window_minutes: int,
        catalog: Callable[[], CatalogSnapshot],
        marks: Callable[[CatalogSnapshot], dict[str, int]],
        rollup: Callable[[int | None, int], object],
        sample_lag: Callable[[CatalogSnapshot, int], int],
        clock: Callable[[], float] = time.monotonic,
        now_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    ) -> None:
        self.every_s, self.window_minutes = every_s, window_minutes
        self.catalog, self.marks, self.rollup, self.sample_lag = catalog, marks, rollup, sample_lag
        self.clock, self.now_ms = clock, now_ms
        self.next_at = clock()  # the first tick is due at once
        self.last_marks: dict[str, int] | None = None
        self.last_until_ms: int | None = None

    def __call__(self) -> Tick | None:
        """Run the tick if it is due; what it did (None when not due or failed)."""
        if self.clock() < self.next_at:
            return None
        self.next_at = self.clock() + self.every_s
        try:
            return self.tick()
        except Exception:  # the archive must outlive a failed rollup
            log.exception("rollup failed; retrying at the next tick")
            return None

    def tick(self) -> Tick:
        snapshot = self.catalog()
        now = self.now_ms()
        marks = self.marks(snapshot)
        if marks == self.last_marks:  # all appended so far is rolled up already
            self.last_until_ms = now
            return Tick(ran=False, lag_samples=self.sample_lag(snapshot, now))
        since = None
        if self.last_until_ms is not None:
            floor = now - now % 60_000 - self.window_minutes * 60_000
            since = max(floor, self.last_until_ms - SLACK_MS)
        self.rollup(since, self.window_minutes)
        self.last_marks, self.last_until_ms = marks, now
        return Tick(ran=True, since_ms=since)
