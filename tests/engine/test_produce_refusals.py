"""The engine counts the messages it refuses a producer, by why, whatever the protocol's
front-end: what the produce-refusal alert reads."""

from __future__ import annotations

import pytest

from brokers.engine import (
    AccessDenied,
    InvalidMessage,
    Message,
    MessageTooLarge,
    QueueFull,
    QueueSettings,
    RateLimited,
    TopicNotFound,
)
from tests.engine.conftest import snapshot


def catalog():
    return snapshot(
        topics={
            "t": {"partitions": 1},
            "u": {"partitions": 1},
            "q": {
                "partitions": 1,
                "queue": QueueSettings(max_queue_size=1, overflow_policy="BlockPublisher"),
            },
        },
        producers=[
            {"topic": "t", "app": "a", "rate_limit": 2},
            {"topic": "q", "app": "a"},
            {"topic": "u", "app": "a"},
        ],
    )


async def test_refusals_are_counted_by_why(make_engine, clock):
    engine = make_engine(catalog())
    engine.max_body = 100
    await engine.append("t", "a", [Message(b"ok")])
    with pytest.raises(MessageTooLarge):
        await engine.append("t", "a", [Message(b"x" * 200)] * 2)
    with pytest.raises(AccessDenied):
        await engine.append("t", "stranger", [Message(b"x")])
    with pytest.raises(InvalidMessage):
        await engine.append("t", "a", [])
    results = await engine.append_many("t", "a", [Message(b"1"), Message(b"2"), Message(b"3")])
    assert [type(r).__name__ for r in results] == ["AppendResult", "RateLimited", "RateLimited"]
    with pytest.raises(RateLimited):
        await engine.append_delayed(
            "t", "a", Message(b"later"), deliver_at_ms=engine.now_ms() + 1000
        )
    await engine.append("q", "a", [Message(b"fills it")])
    with pytest.raises(QueueFull):
        await engine.append("q", "a", [Message(b"one too many")])
    mixed = await engine.append_many("u", "a", [Message(b"1"), Message(b"x" * 200), Message(b"3")])
    assert [type(r).__name__ for r in mixed] == ["AppendResult", "MessageTooLarge", "AppendResult"]
    bounded = await engine.append_many("q", "a", [Message(b"x" * 200)])
    assert [type(r).__name__ for r in bounded] == ["MessageTooLarge"]
    with pytest.raises(TopicNotFound):  # no topic: not the producer's business
        await engine.append("nowhere", "a", [Message(b"x")])
    assert await engine.produce_refusals() == {
        ("t", "a"): {"too_large": 2, "invalid": 1, "rate_limited": 3},
        ("t", "stranger"): {"not_allowed": 1},
        ("q", "a"): {"queue_full": 1, "too_large": 1},
        ("u", "a"): {"too_large": 1},
    }
    clock.advance(61 * 60)  # out of the window
    assert await engine.produce_refusals() == {}
    assert await engine.produce_refusals(minutes=120) != {}
