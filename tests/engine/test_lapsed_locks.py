"""A pull consumer (JMQ4, HTTP-MQ) that lets its fetch lock run out without acking its
batch failed those messages, as a nack would: the next fetch counts them once, into the
group's consume failures (what the consume-failure alert reads), on either path the
fetch takes (one script over every partition, or the partitions one by one)."""

from __future__ import annotations

from brokers.engine import Message
from tests.engine.conftest import snapshot


def catalog():
    return snapshot(
        topics={"t": {"partitions": 1}},
        consumers=[{"topic": "t", "app": "a", "start_position": "earliest"}],
    )


async def failures(engine) -> int:
    return (await engine.consume_failures([("t", "a")])).get(("t", "a"), 0)


async def test_what_a_lapsed_lock_left_unacked_counts_as_failed_once(make_engine, clock):
    engine = make_engine(catalog())
    await engine.append("t", "a", [Message(b"x")] * 5, partition=0)
    got = await engine.fetch("t", "a", count=3, ack_timeout_ms=1000, owner="c1")
    # a partial ack releases the lock (jmq4.md §6.4): what is left is no failure
    await engine.ack("t", "a", 0, [got.messages[0].index], owner="c1")
    assert await failures(engine) == 0
    held = await engine.fetch("t", "a", count=2, ack_timeout_ms=1000, owner="c2")
    assert [d.index for d in held.messages] == [1, 2] and await failures(engine) == 0
    clock.advance(2)  # c2's lock runs out with both unacked
    again = await engine.fetch("t", "a", count=10, ack_timeout_ms=1000, owner="c3")
    assert [d.index for d in again.messages] == [1, 2, 3, 4]
    assert await failures(engine) == 2
    await engine.ack("t", "a", 0, [d.index for d in again.messages], owner="c3")
    clock.advance(2)  # acked in full before it ran out: nothing failed
    await engine.append("t", "a", [Message(b"y")], partition=0)
    last = await engine.fetch("t", "a", count=10, ack_timeout_ms=1000, owner="c4")
    assert [d.index for d in last.messages] == [5]
    assert await failures(engine) == 2


async def test_a_lock_released_or_acked_is_no_failure(make_engine, clock):
    engine = make_engine(catalog())
    await engine.append("t", "a", [Message(b"x")] * 2, partition=0)
    got = await engine.fetch("t", "a", count=1, ack_timeout_ms=1000, owner="c1")
    await engine.unlock("t", "a", 0, owner="c1")  # given back on purpose (a close)
    clock.advance(2)
    await engine.fetch("t", "a", count=1, ack_timeout_ms=1000, owner="c2")
    assert got.found and await failures(engine) == 0


def delayed_catalog(delay_ms: int, partitions: int = 1):
    return snapshot(
        topics={"t": {"partitions": partitions}},
        consumers=[{"topic": "t", "app": "a", "start_position": "earliest", "delay_ms": delay_ms}],
    )


async def test_a_lapsed_lock_on_a_partition_a_delay_now_holds_back_counts(make_engine, clock):
    """The consumer's delay was raised after its batch was handed out: the fetch that
    finds the lock lapsed reads nothing there (the messages are too young now), and still
    counts the failure."""
    engine = make_engine(delayed_catalog(0, partitions=2))
    await engine.append("t", "a", [Message(b"x")] * 3, partition=0)
    held = await engine.fetch("t", "a", count=3, ack_timeout_ms=1000, owner="c1")
    assert held.partition == 0 and len(held.messages) == 3
    clock.advance(2)
    engine.set_snapshot(delayed_catalog(3_600_000, partitions=2))
    got = await engine.fetch("t", "a", count=10, ack_timeout_ms=1000, owner="c2")
    assert got.status.value == "NO_NEW_MSG" and await failures(engine) == 3


async def test_a_lapse_counts_when_another_partition_wins_the_fetch(make_engine, clock):
    engine = make_engine(delayed_catalog(0, partitions=2))
    await engine.append("t", "a", [Message(b"old")], partition=1)
    clock.advance(3_700)
    await engine.append("t", "a", [Message(b"x")] * 4, partition=0)  # more: looked at first
    held = await engine.fetch("t", "a", count=4, ack_timeout_ms=1000, owner="c1")
    assert held.partition == 0 and len(held.messages) == 4
    clock.advance(2)
    engine.set_snapshot(delayed_catalog(3_600_000, partitions=2))  # 0's are too young now
    won = await engine.fetch("t", "a", count=10, ack_timeout_ms=1000, owner="c2")
    assert won.partition == 1 and len(won.messages) == 1
    assert await failures(engine) == 4
