"""The long-poll waiting limits of jmq4.md §6.2 (brokers.servers.jmq4.parking)."""

from __future__ import annotations

from brokers.servers.jmq4.parking import LongPollSlots


def test_a_group_waits_at_most_as_often_as_the_broker_leads_partitions() -> None:
    slots = LongPollSlots()
    assert slots.take("t", "a", None, 2) and slots.take("t", "a", None, 2)
    assert not slots.take("t", "a", None, 2)
    assert slots.take("t", "a", "10.0.0.1", 2)  # a broadcast client competes with no other
    assert slots.take("t", "b", None, 2) and slots.take("u", "a", None, 1)  # other groups, topics
    slots.give_back("t", "a", None)
    assert slots.waiting("t", "a") == 1
    assert slots.take("t", "a", None, 2)


def test_the_process_total_caps_every_group() -> None:
    slots = LongPollSlots(total=3)
    assert all(slots.take(f"t{i}", "a", None, 5) for i in range(3))
    assert not slots.take("t9", "a", None, 5)
    slots.give_back("t0", "a", None)
    assert slots.waiting("t0", "a") == 0
    assert slots.take("t9", "a", None, 5)
