"""A queue's dead letters never reach another team: when its dead-letter queue's name
(``<queue>.dlq``) is a topic of another team — made first, before the queue — a dead
letter goes to the group's own dead-letter store, an expired one is dropped and counted,
and an overflow the queue would redirect is refused (the publisher hears QUEUE_FULL)."""

from __future__ import annotations

import pytest

from brokers.engine import Message, QueueFull, QueueSettings
from tests.engine.conftest import snapshot


def two_teams(**settings) -> object:
    """Queue ``q`` of team red with ``settings``; topic ``q.dlq`` of team blue, which app
    ``b`` consumes; app ``a`` produces and consumes ``q``."""
    return snapshot(
        topics={
            "q": {"partitions": 1, "team": "red", "queue": QueueSettings(**settings)},
            "q.dlq": {"partitions": 1, "team": "blue", "queue": QueueSettings()},
        },
        producers=[{"topic": "q", "app": "a"}],
        consumers=[{"topic": "q", "app": "a"}, {"topic": "q.dlq", "app": "b"}],
    )


async def blue_got(engine) -> list[bytes]:
    got = await engine.lease("q.dlq", "b", count=10, owner="o")
    return [d.message.body for d in got.deliveries]


async def test_a_dead_letter_stays_with_its_group(make_engine):
    engine = make_engine(two_teams(max_retry_attempts=0, dead_letter_enabled=True))
    await engine.append_many("q", "a", [Message(b"job")])
    [d] = (await engine.lease("q", "a", count=1, owner="o")).deliveries
    await engine.fail("q", "a", 0, [d.index])
    assert await blue_got(engine) == []
    [dead] = await engine.dead_letters("q", "a")
    assert dead.message.body == b"job"


async def test_an_overflow_is_refused_not_redirected(make_engine):
    engine = make_engine(
        two_teams(max_queue_size=1, overflow_policy="RedirectToDlq", dead_letter_enabled=True)
    )
    await engine.append_many("q", "a", [Message(b"1")])
    [refused] = await engine.append_many("q", "a", [Message(b"2")])
    assert isinstance(refused, QueueFull) and "another team" in str(refused)
    with pytest.raises(QueueFull):
        await engine.append("q", "a", [Message(b"3")])
    assert await blue_got(engine) == []
