"""Delayed and timer messages: held until due, then appended once, in due order."""

from __future__ import annotations

import pytest

from brokers.engine import (
    DELAY_ID,
    InvalidMessage,
    Message,
    MessageTooLarge,
    ProducerNotFound,
    Whereabouts,
)
from brokers.engine.delay import KEEP_RELEASED_MS, DelayKeys


async def test_held_until_due_then_appended(make_engine, clock):
    engine = make_engine()
    now = engine.now_ms()
    await engine.append_delayed(
        "t", "a", Message(b"later", business_id="k"), deliver_at_ms=now + 5_000, partition=2
    )
    await engine.append_delayed(
        "t", "a", Message(b"sooner"), deliver_at_ms=now + 1_000, partition=2
    )
    assert await engine.delayed_pending("t") == 2
    assert await engine.release_delayed("t") == 0
    assert await engine.bounds("t", 2) == (0, 0)
    clock.advance(1.5)
    assert await engine.release_delayed("t") == 1
    clock.advance(5)
    assert await engine.release_delayed("t") == 1
    got = await engine.read("t", 2, 0, 10)
    assert [d.message.body for d in got] == [b"sooner", b"later"]
    assert got[1].message.business_id == "k"
    assert await engine.delayed_pending("t") == 0
    assert await engine.release_delayed("t") == 0


async def test_delayed_input_is_checked_when_produced(make_engine):
    engine = make_engine()
    now = engine.now_ms()
    with pytest.raises(ProducerNotFound):
        await engine.append_delayed("t", "nobody", Message(b"x"), deliver_at_ms=now + 10)
    with pytest.raises(InvalidMessage):
        await engine.append_delayed(
            "t", "a", Message(b"x"), deliver_at_ms=now + 31 * 24 * 3600 * 1000
        )
    with pytest.raises(MessageTooLarge):
        await engine.append_delayed(
            "t", "a", Message(b"x" * (engine.max_body + 1)), deliver_at_ms=now + 10
        )
    assert await engine.delayed_pending("t") == 0
    await engine.append_delayed("t", "a", Message(b"past"), deliver_at_ms=now - 10, partition=0)
    assert await engine.release_delayed("t") == 1  # a time already past is due at once


async def test_one_mover_at_a_time(make_engine, clock):
    first, second = make_engine(), make_engine()
    now = first.now_ms()
    for i in range(5):
        await first.append_delayed(
            "t", "a", Message(f"m{i}".encode()), deliver_at_ms=now, partition=0
        )
    moved = await first.release_delayed("t") + await second.release_delayed("t")
    assert moved == 5
    assert [d.message.body for d in await first.read("t", 0, 0, 10)] == [
        b"m0",
        b"m1",
        b"m2",
        b"m3",
        b"m4",
    ]


async def test_release_all_only_visits_topics_with_delays(make_engine, clock):
    engine = make_engine()
    await engine.append_delayed("t", "a", Message(b"x"), deliver_at_ms=engine.now_ms() + 100)
    assert await engine.release_all_delayed() == 0
    clock.advance(1)
    assert await engine.release_all_delayed() == 1
    assert await engine.redis.smembers("mq:delayed-topics") == set()


async def test_a_released_message_keeps_its_delay_id(make_engine, clock):
    engine = make_engine()
    now = engine.now_ms()
    held = await engine.append_delayed(
        "t", "a", Message(b"x", attributes={"k": "v"}), deliver_at_ms=now + 1_000, partition=1
    )
    assert await engine.delayed_whereabouts("t", held) == Whereabouts(due_ms=now + 1_000)
    assert await engine.delayed_whereabouts("t", held + 1) == Whereabouts()
    await engine.append("t", "a", [Message(b"first")], partition=1)
    clock.advance(1.5)
    assert await engine.release_delayed("t") == 1
    assert await engine.delayed_whereabouts("t", held) == Whereabouts(partition=1, index=1)
    (got,) = await engine.read("t", 1, 1, 10)
    assert got.message.attributes == {"k": "v", DELAY_ID: str(held)}


async def test_released_positions_are_forgotten_with_the_topics_messages(make_engine, clock):
    """Positions are kept as long as the topic keeps messages (a week without an age
    limit), trimmed as new ones are added and expiring when none are."""
    engine = make_engine()
    first = await engine.append_delayed("t", "a", Message(b"1"), deliver_at_ms=engine.now_ms())
    assert await engine.release_delayed("t") == 1
    keys = DelayKeys("t")
    assert 0 < await engine.redis.pttl(keys.released) <= KEEP_RELEASED_MS
    clock.advance(KEEP_RELEASED_MS / 1000 + 1)
    second = await engine.append_delayed("t", "a", Message(b"2"), deliver_at_ms=engine.now_ms())
    assert await engine.release_delayed("t") == 1
    assert await engine.delayed_whereabouts("t", first) == Whereabouts()
    assert (await engine.delayed_whereabouts("t", second)).partition is not None
    assert await engine.redis.zcard(keys.released_at) == 1
