"""A broker process's GC tuning: startup objects frozen, rarer collections, cycles still
collected."""

from __future__ import annotations

import gc
import weakref

import pytest

from brokers.servers.runtime import OLDER_THRESHOLDS, YOUNG_THRESHOLD, tune_gc


@pytest.fixture
def restored_gc():
    before = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*before)


class Node:
    def __init__(self) -> None:
        self.other: Node | None = None


def test_tune_gc_freezes_startup_objects_and_still_collects_cycles(restored_gc):
    tune_gc()
    assert gc.get_threshold() == (YOUNG_THRESHOLD, *OLDER_THRESHOLDS)
    assert gc.get_freeze_count() > 0
    a, b = Node(), Node()
    a.other, b.other = b, a
    gone = weakref.ref(a)
    del a, b
    gc.collect()
    assert gone() is None
