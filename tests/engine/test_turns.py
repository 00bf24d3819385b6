"""Partition turns: produces without a partition go round-robin, weighted."""

from __future__ import annotations

import collections
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from brokers.engine import BrokerNotWritable, Message
from brokers.engine.catalog import PartitionGroupInfo
from brokers.engine.turns import PartitionTurns
from tests.engine.conftest import snapshot

TWO_BROKERS = (
    PartitionGroupInfo(group_id=0, leader=1, partitions=(0, 1)),
    PartitionGroupInfo(group_id=1, leader=2, partitions=(2, 3)),
)
"""Partitions 0 and 1 led by broker 1, 2 and 3 by broker 2."""


class Snapshot:
    """Stands for a catalog snapshot: turns tell them apart by identity."""


SNAP = Snapshot()

weights = st.lists(st.integers(1, 7), min_size=1, max_size=8)


@given(weights, st.integers(0, 2**32), st.integers(1, 4))
def test_every_cycle_gives_each_partition_its_weight(ws, seed, cycles):
    pairs = list(enumerate(ws))
    turns = PartitionTurns(random.Random(seed))
    total = sum(ws)
    for _ in range(cycles):
        got = collections.Counter(turns.next("t", "a", SNAP, lambda: pairs) for _ in range(total))
        assert got == dict(pairs)


def test_turns_are_kept_per_topic_and_app_and_restart_on_a_change():
    turns = PartitionTurns(random.Random(1))
    pairs = [(0, 1), (1, 1), (2, 1)]
    a = [turns.next("t", "a", SNAP, lambda: pairs) for _ in range(3)]
    b = [turns.next("t", "b", SNAP, lambda: pairs) for _ in range(3)]
    assert sorted(a) == sorted(b) == [0, 1, 2]
    fewer = [(0, 1), (2, 1)]
    # the same catalog: the partitions are not worked out again
    asked = []
    assert turns.next("t", "a", SNAP, lambda: asked.append(1) or fewer) in (0, 1, 2)
    assert asked == []
    # a new catalog with a partition less: a new turn over what is left
    changed = Snapshot()
    assert sorted(turns.next("t", "a", changed, lambda: fewer) for _ in range(4)) == [0, 0, 2, 2]
    assert turns.next("t", "a", Snapshot(), list) == -1  # nothing writable


async def test_appends_without_a_partition_take_turns_by_weight(make_engine):
    groups = TWO_BROKERS
    engine = make_engine(
        snapshot(topics={"t": {"partitions": 4, "groups": groups}}, brokers={1: {}, 2: {}})
    )
    got = [(await engine.append("t", "a", [Message(b"m")])).partition for _ in range(8)]
    assert sorted(got) == [0, 0, 1, 1, 2, 2, 3, 3] and got[:4] == got[4:]
    many = await engine.append_many("t", "a", [Message(b"x")] * 3)
    assert len({r.partition for r in many}) == 1  # one call, one partition, as before
    weighted = snapshot(
        topics={"t": {"partitions": 4, "groups": groups}},
        brokers={1: {}, 2: {}},
        producers=[{"topic": "t", "app": "a", "weights": {1: 1, 2: 3}}],
    )
    engine.set_snapshot(weighted)
    got = [(await engine.append("t", "a", [Message(b"m")])).partition for _ in range(16)]
    assert collections.Counter(got) == {0: 2, 1: 2, 2: 6, 3: 6}


async def test_a_delayed_message_goes_to_its_turns_partition_unless_it_went(make_engine, clock):
    groups = TWO_BROKERS
    topics = {"t": {"partitions": 4, "groups": groups}}
    engine = make_engine(snapshot(topics=topics, brokers={1: {}, 2: {}}))
    now = engine.now_ms()
    held = [
        await engine.append_delayed("t", "a", Message(b"%d" % i), deliver_at_ms=now + 10)
        for i in range(4)
    ]
    assert sorted(h.partition for h in held) == [0, 1, 2, 3]  # what each producer was told
    # broker 2 (partitions 2 and 3) stops taking writes before they are due
    engine.set_snapshot(snapshot(topics=topics, brokers={1: {}, 2: {"writable": False}}))
    clock.advance(1)
    assert await engine.release_delayed("t") == 4
    for h in held:
        landed = (await engine.delayed_whereabouts("t", h.delay_id)).partition
        assert landed == h.partition if h.partition in (0, 1) else landed in (0, 1)


async def test_a_delayed_message_with_a_named_partition_waits_for_it(make_engine, clock):
    groups = TWO_BROKERS
    topics = {"t": {"partitions": 4, "groups": groups}}
    engine = make_engine(snapshot(topics=topics, brokers={1: {}, 2: {}}))
    pinned = await engine.append_delayed(
        "t", "a", Message(b"pinned"), deliver_at_ms=engine.now_ms() + 10, partition=3
    )
    assert pinned.partition == 3
    engine.set_snapshot(snapshot(topics=topics, brokers={1: {}, 2: {"writable": False}}))
    clock.advance(1)
    with pytest.raises(BrokerNotWritable):
        await engine.release_delayed("t")
    assert (await engine.delayed_whereabouts("t", pinned.delay_id)).due_ms is not None
    engine.set_snapshot(snapshot(topics=topics, brokers={1: {}, 2: {}}))
    assert await engine.release_delayed("t") == 1
    assert (await engine.delayed_whereabouts("t", pinned.delay_id)).partition == 3


async def test_no_writable_partition_holds_the_message_all_the_same(make_engine, clock):
    topics = {
        "t": {
            "partitions": 2,
            "groups": (PartitionGroupInfo(group_id=0, leader=1, partitions=(0, 1)),),
        }
    }
    engine = make_engine(snapshot(topics=topics, brokers={1: {"writable": False}}))
    held = await engine.append_delayed("t", "a", Message(b"x"), deliver_at_ms=engine.now_ms())
    assert held.partition is None  # chosen when due
    engine.set_snapshot(snapshot(topics=topics, brokers={1: {}}))
    assert await engine.release_delayed("t") == 1
