"""The read-ahead budget's accounting (brokers.servers.readahead)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from brokers.engine import Delivery
from brokers.servers.readahead import PER_DELIVERY, ReadAheadBudget, footprint


def _deliveries(sizes: list[int]) -> list[Delivery]:
    return [Delivery(0, i, 1, b"x" * n) for i, n in enumerate(sizes)]


@given(
    limit=st.integers(0, 5_000),
    batches=st.lists(st.lists(st.integers(0, 600), max_size=8), max_size=12),
    data=st.data(),
)
def test_held_never_passes_the_limit_and_returns_to_zero(limit, batches, data):
    budget = ReadAheadBudget(limit)
    kept: list[Delivery] = []
    turned_away = 0
    for sizes in batches:
        batch = _deliveries(sizes)
        fit = budget.keep(batch)
        turned_away += len(batch) - fit
        assert footprint(batch[:fit]) <= limit  # what fits is a prefix, in order
        kept += batch[:fit]
        assert budget.held == footprint(kept) <= limit
        if kept and data.draw(st.booleans()):  # some are dealt or go back
            n = data.draw(st.integers(1, len(kept)))
            budget.release(kept[:n])
            kept = kept[n:]
    assert budget.refused == turned_away
    budget.release(kept)
    assert budget.held == 0 and budget.peak <= limit


def test_a_spent_budget_is_closed_until_something_is_released():
    one = _deliveries([100])
    budget = ReadAheadBudget(footprint(one))
    assert budget.open and budget.keep(one) == 1
    assert not budget.open
    assert budget.keep(_deliveries([0])) == 0 and budget.refused == 1
    budget.release(one)
    assert budget.open and budget.held == 0 and budget.peak == 100 + PER_DELIVERY


def test_the_environment_sets_the_limit(monkeypatch):
    monkeypatch.setenv("BROKER_READ_AHEAD_MB", "0.5")
    assert ReadAheadBudget.from_environment().limit == 512 * 1024
    monkeypatch.delenv("BROKER_READ_AHEAD_MB")
    assert ReadAheadBudget.from_environment().limit == 64 * 1024 * 1024
    for bad in ("-1", "nan", "lots"):
        monkeypatch.setenv("BROKER_READ_AHEAD_MB", bad)
        with pytest.raises(ValueError):
            ReadAheadBudget.from_environment()
