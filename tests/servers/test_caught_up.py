"""The caught-up marks dispatchers keep (brokers/servers/caught_up.py)."""

from __future__ import annotations

import math

from brokers.engine import Lease
from brokers.servers.caught_up import CaughtUp


def _lease(more: bool, retry_after_ms: int | None = None) -> Lease:
    return Lease("q", "a", more=more, retry_after_ms=retry_after_ms)


def test_a_lease_marks_until_its_hint_and_more_unmarks() -> None:
    marks: CaughtUp[str] = CaughtUp(catalog_version=1, recheck_every=3)
    marks.record("c", _lease(False, retry_after_ms=500))
    marks.record("d", _lease(False))
    assert marks.holds("c", 499) and not marks.holds("c", 500)
    assert marks.holds("d", 10**15) and marks.next_due() == 500
    marks.record("c", _lease(True))
    assert not marks.holds("c", 0) and marks.next_due() == math.inf


def test_ticks_clear_only_on_a_catalog_change_or_every_nth() -> None:
    marks: CaughtUp[str] = CaughtUp(catalog_version=1, recheck_every=3)
    marks.record("c", _lease(False))
    marks.tick(1)
    marks.tick(1)
    assert marks.holds("c", 0)
    marks.tick(1)  # the third quiet tick: the safety net
    assert not marks.holds("c", 0)
    marks.record("c", _lease(False))
    marks.tick(2)  # the catalog changed
    assert not marks.holds("c", 0)
    marks.record("c", _lease(False))
    marks.clear()  # notified
    assert not marks.holds("c", 0)
