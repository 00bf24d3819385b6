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
    await engine.ack("t", "a", 0, [got.messages[0].index], owner="c1")
    assert await failures(engine) == 0
    clock.advance(2)  # the lock runs out with two of the three unacked
    again = await engine.fetch("t", "a", count=10, ack_timeout_ms=1000, owner="c2")
    assert [d.index for d in again.messages] == [1, 2, 3, 4]
    assert await failures(engine) == 2
    await engine.ack("t", "a", 0, [d.index for d in again.messages], owner="c2")
    clock.advance(2)  # acked in full before it ran out: nothing failed
    await engine.append("t", "a", [Message(b"y")], partition=0)
    last = await engine.fetch("t", "a", count=10, ack_timeout_ms=1000, owner="c3")
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
