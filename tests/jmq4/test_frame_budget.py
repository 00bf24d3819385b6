"""FrameBudget: a response's messages stay under the frame maximum, in order, at least one."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from brokers.engine import Delivery
from brokers.servers.jmq4.frame_budget import MARGIN, PER_MESSAGE, FrameBudget


def deliveries(sizes: list[int]) -> list[Delivery]:
    return [Delivery(partition=0, index=i, count=1, record=b"r" * n) for i, n in enumerate(sizes)]


@given(
    st.integers(MARGIN, MARGIN + 10_000),
    st.lists(st.lists(st.integers(1, 4_000), max_size=8), max_size=4),
)
def test_what_a_response_takes_fits_and_keeps_order(frame: int, entries: list[list[int]]) -> None:
    budget = FrameBudget(frame)
    total = taken = 0
    for sizes in entries:
        given_ = deliveries(sizes)
        kept, rest = budget.take(given_)
        assert kept + rest == given_  # a prefix is kept, in order
        if rest:
            assert taken + len(kept) > 0  # nothing is held back from an empty response
        total += sum(len(d.record) + PER_MESSAGE for d in kept)
        taken += len(kept)
    if taken > 1:
        assert total <= frame - MARGIN


def test_the_first_message_always_goes() -> None:
    kept, rest = FrameBudget(MARGIN + 10).take(deliveries([500, 1]))
    assert [d.index for d in kept] == [0] and [d.index for d in rest] == [1]
