"""A topic's send-back limit (console-features "100 QPS for consumer send-back", edited
live): the failed messages its consumers copy into their retry stores (JMQ4 acks with a
retry type) are at most that many a second, all consumers together; a failed run past it
is not copied but delivered again, as on a sequential topic, and nothing is lost."""

from __future__ import annotations

from brokers.engine import AckStatus, Message, RetryType
from tests.engine.conftest import snapshot


def catalog(limit: int | None):
    return snapshot(
        topics={"t": {"partitions": 1, "send_back_limit": limit}},
        consumers=[{"topic": "t", "app": "a"}, {"topic": "t", "app": "b"}],
    )


async def fail_next(engine, app: str, count: int):
    """Fetch ``count`` messages as ``app`` and ack them all as failed."""
    got = await engine.fetch("t", app, count=count, owner=f"c-{app}")
    indexes = [m.index for m in got.messages]
    assert len(indexes) == count
    result = await engine.ack(
        "t", app, 0, indexes, retry_type=RetryType.EXCEPTION, owner=f"c-{app}",
        token=got.lock_token,
    )  # fmt: skip
    return indexes, result


async def test_send_back_past_the_limit_is_delivered_again_not_copied(make_engine, clock):
    engine = make_engine(catalog(5))
    await engine.append("t", "a", [Message(b"m%d" % i) for i in range(12)], partition=0)
    _, copied = await fail_next(engine, "a", 4)
    assert copied.status is AckStatus.OK and len(copied.retry_ids) == 4
    # the other consumer group shares the topic's limit: 1 permit left, 3 wanted
    again, refused = await fail_next(engine, "b", 3)
    assert refused.status is AckStatus.REDELIVER and refused.retry_ids == ()
    redelivered = await engine.fetch("t", "b", count=3, owner="c-b")
    assert [m.index for m in redelivered.messages] == again
    assert await engine.retry_counts("t", "b") == (0, 0)  # (waiting, dead)
    # counted, per consumer group, beside its failures: an operator sees why
    held = await engine.held_back_send_backs([("t", "a"), ("t", "b")])
    assert held == {("t", "b"): 3}
    assert await engine.consume_failures([("t", "b")]) == {("t", "b"): 3}
    clock.advance(1.1)  # refilled, and the 1 s block is over
    copied = await engine.ack(
        "t", "b", 0, again, retry_type=RetryType.EXCEPTION, owner="c-b",
        token=redelivered.lock_token,
    )  # fmt: skip
    assert copied.status is AckStatus.OK and len(copied.retry_ids) == 3
    assert await engine.retry_counts("t", "b") == (3, 0)
    assert await engine.held_back_send_backs([("t", "b")]) == {("t", "b"): 3}  # not again
    clock.advance(61 * 60)
    assert await engine.held_back_send_backs([("t", "b")]) == {}  # past the hour's window


async def test_without_a_limit_every_failure_is_copied(make_engine):
    engine = make_engine(catalog(None))
    await engine.append("t", "a", [Message(b"m%d" % i) for i in range(300)], partition=0)
    _, copied = await fail_next(engine, "a", 300)
    assert copied.status is AckStatus.OK and len(copied.retry_ids) == 300
    assert await engine.held_back_send_backs([("t", "a")]) == {}


async def test_a_limit_set_later_applies_at_once(make_engine):
    engine = make_engine(catalog(None))
    await engine.append("t", "a", [Message(b"m%d" % i) for i in range(4)], partition=0)
    engine.set_snapshot(catalog(1))
    _, first = await fail_next(engine, "a", 2)  # more than the rate: a full bucket lets it
    assert first.status is AckStatus.OK and len(first.retry_ids) == 2
    _, second = await fail_next(engine, "a", 1)  # and leaves a debt
    assert second.status is AckStatus.REDELIVER
