"""The caught-up marks dispatchers keep (brokers/servers/caught_up.py)."""

from __future__ import annotations

import math

import pytest

from brokers.engine import Lease
from brokers.servers.caught_up import CaughtUp


def _lease(more: bool, retry_after_ms: int | None = None) -> Lease:
    return Lease("q", "a", more=more, retry_after_ms=retry_after_ms)


class Catalog:
    """An engine's ``consumer_terms`` whose answer the test sets."""

    def __init__(self) -> None:
        self.policy = "policy"

    def consumer_terms(self, topic: str, app: str) -> tuple[object, ...]:
        return (topic, app, self.policy)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_lease_marks_until_its_hint_and_more_unmarks() -> None:
    marks: CaughtUp[str] = CaughtUp(recheck_s=3)
    marks.record("c", _lease(False, retry_after_ms=500))
    marks.record("d", _lease(False))
    assert marks.holds("c", 499) and not marks.holds("c", 500)
    assert marks.holds("d", 10**15) and marks.next_due() == 500
    marks.record("c", _lease(True))
    assert not marks.holds("c", 0) and marks.next_due() == math.inf


def test_the_sleep_ends_at_the_earliest_hint_or_the_safety_net() -> None:
    clock = Clock()
    marks: CaughtUp[str] = CaughtUp(recheck_s=30, clock=clock)
    first = marks.wait_s(now_ms=0, longest=math.inf)
    assert 0.01 <= first <= 30  # the first recheck somewhere in the period (spread)
    clock.now += first
    marks.recheck()
    assert marks.wait_s(now_ms=0, longest=math.inf) == pytest.approx(30)  # then every period
    assert marks.wait_s(now_ms=0, longest=2.5) == 2.5
    marks.record("c", _lease(False, retry_after_ms=1_200))
    marks.record("d", _lease(False))
    assert marks.wait_s(now_ms=1_000, longest=math.inf) == pytest.approx(0.2)
    assert marks.wait_s(now_ms=5_000, longest=math.inf) == 0.01  # already due


def test_marks_clear_on_notification_catalog_change_or_due_recheck_only() -> None:
    clock = Clock()
    marks: CaughtUp[str] = CaughtUp(recheck_s=30, clock=clock)
    catalog = Catalog()
    assert not marks.catalog(catalog, "q", ["a"])  # the first: recorded
    clock.now += 30
    marks.recheck()  # the first, spread recheck is past
    marks.record("c", _lease(False))
    clock.now += 29
    marks.recheck()  # not due yet
    assert not marks.catalog(catalog, "q", ["a", "a"])  # a change elsewhere in the catalog
    assert marks.holds("c", 0)
    clock.now += 1
    marks.recheck()  # the safety net
    assert not marks.holds("c", 0)
    marks.record("c", _lease(False))
    catalog.policy = "policy paused"
    assert marks.catalog(catalog, "q", ["a"])  # a change that concerns them
    assert not marks.holds("c", 0)
    marks.record("c", _lease(False))
    marks.clear()  # notified
    assert not marks.holds("c", 0)


def test_settled_names_the_groups_a_lease_found_empty() -> None:
    marks: CaughtUp[tuple[str, str]] = CaughtUp(recheck_s=3)
    marks.record(("a", "10.0.0.1"), _lease(False))
    marks.record(("a", "10.0.0.2"), _lease(True))  # more there: no mark of its own
    marks.record(("b", "10.0.0.1"), _lease(False, retry_after_ms=500))
    marks.record(("c", "10.0.0.1"), _lease(True))
    assert marks.settled(499) == {"a", "b"}
    assert marks.settled(500) == {"a"}  # b's hint is due: it may have more by now
    marks.clear()
    assert marks.settled(0) == set()
