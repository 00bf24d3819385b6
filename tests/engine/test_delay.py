"""Delayed and timer messages: held until due, then appended once, in due order."""

from __future__ import annotations

import asyncio

import pytest

from brokers.engine import (
    DELAY_ID,
    DelayedMessagesBusy,
    InvalidMessage,
    Message,
    MessageTooLarge,
    ProducerNotFound,
    TopicNotFound,
    Whereabouts,
)
from brokers.engine.delay import KEEP_RELEASED_MS, DelayKeys, DelayStore


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
    held, partition = await engine.append_delayed(
        "t", "a", Message(b"x", attributes={"k": "v"}), deliver_at_ms=now + 1_000, partition=1
    )
    assert partition == 1
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
    first, _ = await engine.append_delayed("t", "a", Message(b"1"), deliver_at_ms=engine.now_ms())
    assert await engine.release_delayed("t") == 1
    keys = DelayKeys("t")
    assert 0 < await engine.redis.pttl(keys.released) <= KEEP_RELEASED_MS
    clock.advance(KEEP_RELEASED_MS / 1000 + 1)
    second, _ = await engine.append_delayed("t", "a", Message(b"2"), deliver_at_ms=engine.now_ms())
    assert await engine.release_delayed("t") == 1
    assert await engine.delayed_whereabouts("t", first) == Whereabouts()
    assert (await engine.delayed_whereabouts("t", second)).partition is not None
    assert await engine.redis.zcard(keys.released_at) == 1


async def _hold(engine, count: int, *, first_due_ms: int, step_ms: int) -> list[int]:
    return [
        (
            await engine.append_delayed(
                "t",
                "a",
                Message(f"m{i}".encode(), attributes={"k": str(i)}),
                deliver_at_ms=first_due_ms + i * step_ms,
                partition=1,
            )
        ).delay_id
        for i in range(count)
    ]


async def test_held_messages_are_listed_soonest_first_and_paged(make_engine, clock):
    engine = make_engine()
    now = engine.now_ms()
    ids = await _hold(engine, 7, first_due_ms=now + 10_000, step_ms=1_000)
    total, rows = await engine.delayed_messages("t", offset=0, limit=3)
    assert total == 7
    assert [r.delay_id for r in rows] == ids[:3]
    assert [r.due_ms for r in rows] == [now + 10_000, now + 11_000, now + 12_000]
    assert rows[1].held.body == b"m1" and rows[1].held.attributes == {"k": "1"}
    assert rows[1].held.app == "a" and rows[1].held.partition == 1
    assert await engine.delayed_message("t", ids[1]) == rows[1]
    assert await engine.delayed_message("t", 999) is None
    total, rows = await engine.delayed_messages("t", offset=6, limit=3)
    assert [r.delay_id for r in rows] == ids[6:]
    # a due-time window: bounds included
    total, rows = await engine.delayed_messages(
        "t", offset=0, limit=10, due_from_ms=now + 12_000, due_to_ms=now + 14_000
    )
    assert total == 3 and [r.delay_id for r in rows] == ids[2:5]
    # released ones are no longer listed
    clock.advance(12.5)
    assert await engine.release_delayed("t") == 3
    total, rows = await engine.delayed_messages("t", offset=0, limit=10)
    assert total == 4 and [r.delay_id for r in rows] == ids[3:]


async def test_a_cancelled_message_is_never_delivered(make_engine, clock):
    engine = make_engine()
    now = engine.now_ms()
    ids = await _hold(engine, 4, first_due_ms=now + 1_000, step_ms=1_000)
    clock.advance(1.5)
    assert await engine.release_delayed("t") == 1  # m0 is out already
    # the released one, an unknown one and a repeat are left out of the answer
    assert await engine.cancel_delayed("t", [ids[0], ids[1], ids[3], ids[3], 999]) == [
        ids[1],
        ids[3],
    ]
    assert await engine.cancel_delayed("t", [ids[1]]) == []
    assert await engine.delayed_message("t", ids[1]) is None
    assert await engine.delayed_pending("t") == 1
    clock.advance(10)
    assert await engine.release_delayed("t") == 1
    assert [d.message.body for d in await engine.read("t", 1, 0, 10)] == [b"m0", b"m2"]
    assert (await engine.delayed_whereabouts("t", ids[1])) == Whereabouts()
    assert await engine.delayed_pending("t") == 0


async def test_cancel_waits_for_a_running_mover_and_gives_up_unchanged(make_engine, clock):
    engine = make_engine()
    now = engine.now_ms()
    ids = await _hold(engine, 2, first_due_ms=now + 60_000, step_ms=1)
    store = DelayStore(engine.redis, "t")
    token = await store.lock(30_000)  # a mover in the middle of a batch
    assert token is not None

    async def let_go() -> None:
        await asyncio.sleep(0.2)
        await store.unlock(token)

    releasing = asyncio.create_task(let_go())
    assert await engine.cancel_delayed("t", [ids[0]]) == [ids[0]]
    await releasing
    # a mover that does not let go (crashed holding the lock): nothing changes
    assert await store.lock(30_000) is not None
    with pytest.raises(DelayedMessagesBusy):
        await store.cancel([ids[1]], wait_s=0.2)
    assert await engine.delayed_pending("t") == 1


async def test_cancel_and_listing_check_the_topic(make_engine):
    engine = make_engine()
    with pytest.raises(TopicNotFound):
        await engine.delayed_messages("nope")
    with pytest.raises(TopicNotFound):
        await engine.cancel_delayed("nope", [1])
    assert await engine.cancel_delayed("t", []) == []
