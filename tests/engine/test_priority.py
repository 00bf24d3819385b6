"""Priority bands (``PriorityBased`` topics): each priority in its band's partition, the
highest band served first, FIFO within a band — whatever protocol produced."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from brokers.engine import Message, QueueFull, QueueSettings, band_partition, encode_record
from brokers.engine.catalog import TopicInfo
from tests.engine.conftest import snapshot


def prio_snap(partitions: int = 4) -> object:
    queue = QueueSettings(delivery_mode="PriorityBased")
    return snapshot(topics={"p": {"partitions": partitions, "queue": queue}})


async def drain(engine, count: int = 1) -> list[bytes]:
    out: list[bytes] = []
    while got := (await engine.lease("p", "a", count=count, owner="t")).deliveries:
        out += [d.message.body for d in got]
        for d in got:
            await engine.settle("p", "a", d.partition, [d.index])
    return out


async def test_highest_band_first_fifo_within_a_band(make_engine):
    engine = make_engine(prio_snap())
    order = [(0, b"l1"), (1, b"n1"), (3, b"c1"), (2, b"h1"), (0, b"l2"), (3, b"c2"), (1, b"n2")]
    for priority, body in order:
        result = await engine.append("p", "a", [Message(body, priority=priority)])
        assert result.partition == 3 - priority
    assert await drain(engine) == [b"c1", b"c2", b"h1", b"n1", b"n2", b"l1", b"l2"]


async def test_pipelined_publishes_are_split_by_band_and_answered_in_order(make_engine):
    engine = make_engine(prio_snap())
    messages = [Message(b"%d" % i, priority=i % 4) for i in range(8)]
    results = await engine.append_many("p", "a", messages)
    assert [r.partition for r in results] == [3 - i % 4 for i in range(8)]
    assert await drain(engine, count=10) == [b"3", b"7", b"2", b"6", b"1", b"5", b"0", b"4"]


async def test_a_named_partition_and_jmq4_records_follow_the_producer(make_engine):
    engine = make_engine(prio_snap())
    assert (await engine.append("p", "a", [Message(b"x", priority=3)], partition=2)).partition == 2
    record, _ = encode_record(Message(b"jmq4", priority=2), app="a", partition=0, now_ms=1)
    assert (await engine.append("p", "a", [record])).partition == 1  # its priority byte
    assert await drain(engine) == [b"jmq4", b"x"]


async def test_a_new_high_message_overtakes_a_waiting_backlog(make_engine):
    engine = make_engine(prio_snap())
    for i in range(3):
        await engine.append("p", "a", [Message(b"low%d" % i, priority=0)])
    [first] = (await engine.lease("p", "a", count=1, owner="t")).deliveries
    await engine.settle("p", "a", first.partition, [first.index])
    await engine.append("p", "a", [Message(b"urgent", priority=3)])
    assert await drain(engine) == [b"urgent", b"low1", b"low2"]


@settings(max_examples=200, deadline=None)
@given(partitions=st.integers(1, 8), priority=st.integers(-128, 127))
def test_every_priority_has_a_band_inside_the_topic(partitions, priority):
    topic = TopicInfo(code="t", partitions=partitions)
    band = band_partition(topic, priority)
    assert 0 <= band < partitions
    if partitions > 1:
        assert band_partition(topic, priority + 1) <= band  # more urgent: not lower


async def test_jmq4_wire_produce_goes_to_its_band(make_engine):
    from brokers.engine import WireBlob

    engine = make_engine(prio_snap())
    low, _ = encode_record(Message(b"low", priority=0), app="a", partition=0, now_ms=1)
    high, _ = encode_record(Message(b"high", priority=3), app="a", partition=0, now_ms=1)
    assert (await engine.append("p", "a", WireBlob(low, 1))).partition == 3
    assert (await engine.append("p", "a", WireBlob(high, 1))).partition == 0
    assert await drain(engine) == [b"high", b"low"]


def bounded_snap(policy: str, *, consumers: list[dict] | None = None) -> object:
    queue = QueueSettings(
        delivery_mode="PriorityBased",
        max_queue_size=2,
        overflow_policy=policy,
        dead_letter_enabled=True,
    )
    return snapshot(topics={"p": {"partitions": 4, "queue": queue}}, consumers=consumers)


@pytest.mark.parametrize("policy", ["DropOldest", "DropNewest", "BlockPublisher", "RedirectToDlq"])
@pytest.mark.parametrize("pipelined", [True, False])
async def test_max_size_bounds_the_whole_queue_not_each_band(make_engine, clock, policy, pipelined):
    """maxQueueSize 2 over low, high, critical (three bands): the third publish meets the
    policy (vibemq.md §9.2), over the VibeMQ path (append_many) and the JMQ4 / HTTP-MQ
    one (append)."""
    engine = make_engine(bounded_snap(policy))

    async def publish(body: bytes, priority: int):
        clock.advance(0.01)
        if pipelined:
            [result] = await engine.append_many("p", "a", [Message(body, priority=priority)])
            if isinstance(result, Exception):
                raise result
            return result
        return await engine.append("p", "a", [Message(body, priority=priority)])

    await publish(b"low", 0)
    await publish(b"high", 2)
    if policy == "BlockPublisher":
        with pytest.raises(QueueFull):
            await publish(b"critical", 3)
        expected = [b"high", b"low"]
    else:
        result = await publish(b"critical", 3)
        assert result.dropped == (policy == "DropNewest")
        assert result.dead_lettered == (policy == "RedirectToDlq")
        # DropOldest: the oldest queued message of the queue, whatever its band
        expected = [b"critical", b"high"] if policy == "DropOldest" else [b"high", b"low"]
    stats = await engine.queue_stats("p")
    assert (stats.backlog, stats.message_count) == (2, 2)
    assert stats.dropped == (1 if policy in ("DropOldest", "DropNewest") else 0)
    assert await drain(engine, count=5) == expected


async def test_drop_oldest_takes_the_oldest_queued_by_store_time_never_one_in_flight(
    make_engine, clock
):
    engine = make_engine(bounded_snap("DropOldest"))
    for body, priority in ((b"n1", 1), (b"c1", 3), (b"l1", 0)):
        clock.advance(0.01)
        await engine.append_many("p", "a", [Message(body, priority=priority)])
    # over the bound already? no: the third publish dropped the oldest, n1
    [leased] = (await engine.lease("p", "a", count=1, owner="t")).deliveries
    assert leased.message.body == b"c1"  # in flight: counted, never dropped
    clock.advance(0.01)
    await engine.append_many("p", "a", [Message(b"h1", priority=2)])  # l1 goes
    await engine.settle("p", "a", leased.partition, [leased.index])
    assert await drain(engine, count=5) == [b"h1"]
    assert (await engine.queue_stats("p")).dropped == 2


async def test_without_groups_the_bound_counts_every_band(make_engine, clock):
    engine = make_engine(bounded_snap("DropOldest", consumers=[]))
    for body, priority in ((b"l1", 0), (b"h1", 2), (b"c1", 3), (b"l2", 0)):
        clock.advance(0.01)
        await engine.append("p", "a", [Message(body, priority=priority)])
    stats = await engine.queue_stats("p")
    assert (stats.backlog, stats.dropped) == (2, 2)
    assert [(await engine.bounds("p", band)) for band in range(4)] == [
        (0, 1),
        (1, 1),
        (0, 0),
        (1, 2),
    ]  # l1 and h1, the oldest, went; c1 and l2 stay
