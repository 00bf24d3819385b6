"""The read-ahead budget's accounting (brokers.servers.readahead)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from brokers.engine import Delivery
from brokers.servers.readahead import (
    PACE_KEEP,
    PER_DELIVERY,
    Pace,
    Paces,
    ReadAheadBudget,
    footprint,
)


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
    for bad in ("-1", "nan", "inf", "lots"):
        monkeypatch.setenv("BROKER_READ_AHEAD_MB", bad)
        with pytest.raises(ValueError, match="BROKER_READ_AHEAD_MB must be a number >= 0"):
            ReadAheadBudget.from_environment()


def test_pace_is_what_was_dealt_per_interval_rounded_up():
    pace = Pace(now=100.0)
    assert pace.per(1.0, now=100.5) == 0  # nothing taken: nothing worth reading ahead
    pace.dealt = 3
    assert pace.per(1.0, now=101.5) == 2  # 3 in 1.5 s: 2 per second
    assert pace.per(1.0, now=100.0) == 3000  # at once: a floor of 1 ms, never a division by 0


def test_paces_of_consumers_long_idle_are_forgotten_past_a_few_hundred():
    paces: Paces[int] = Paces()
    for n in range(PACE_KEEP):
        paces.leased(n, now=0.0 if n % 2 else 990.0)
    assert all(paces.per(n, 1.0, now=1000.0) is not None for n in range(PACE_KEEP))  # few
    paces.leased(PACE_KEEP, now=1000.0)  # one more: the idle ones go
    kept = {n for n in range(PACE_KEEP + 1) if paces.per(n, 1.0, now=1000.0) is not None}
    assert kept == {n for n in range(PACE_KEEP + 1) if n % 2 == 0}


def test_a_pace_counts_what_was_taken_since_the_last_lease():
    paces: Paces[str] = Paces()
    assert paces.per("a", 1.0, now=0.0) is None  # not known before its first lease
    paces.took("a", 5)  # nothing to count it against: ignored
    paces.leased("a", now=10.0)
    paces.took("a", 2)
    paces.took("a", 1)
    assert paces.per("a", 1.0, now=11.5) == 2
    paces.leased("a", now=12.0)  # a new lease: counted from there
    assert paces.per("a", 1.0, now=13.0) == 0


def test_runbroker_refuses_a_bad_budget_before_it_starts(monkeypatch):
    """A bad ``BROKER_READ_AHEAD_MB`` is the command's own error, not a traceback from
    inside every process it forked."""
    from django.core.management import CommandError, call_command

    monkeypatch.setenv("BROKER_READ_AHEAD_MB", "lots")
    with pytest.raises(CommandError, match="BROKER_READ_AHEAD_MB must be a number"):
        call_command("runbroker", "--broker-id", "1")
