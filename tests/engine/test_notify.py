"""Long-poll wake-ups: ungrouped waiters all wake, a group wakes one waiter with the
partition the notification names, and a leaving waiter hands on what it did not take."""

from __future__ import annotations

import asyncio

import redis.asyncio as aioredis

from brokers.engine.keys import notify_channel
from brokers.engine.notify import Notifier


async def _notify(client: aioredis.Redis, topic: str, payload: object = 0) -> None:
    await client.publish(notify_channel(topic), payload)


async def _settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0.01)


async def test_groups_wake_one_waiter_with_the_partition(redis_url):
    client = aioredis.from_url(redis_url)
    notifier = Notifier(client)
    try:
        async with (
            notifier.watch("t", "g") as a,
            notifier.watch("t", "g") as b,
            notifier.watch("t", "g") as c,
            notifier.watch("t", "other") as d,
            notifier.watch("t") as free,
        ):
            await _notify(client, "t", 3)
            await asyncio.wait_for(a.wait(), 2)
            await _settle()
            assert (a.is_set(), b.is_set(), c.is_set()) == (True, False, False)
            assert d.is_set() and free.is_set()
            assert a.take() == {3} and d.take() == {3} and free.take() == {3}
            assert not a.is_set()

            # a is busy (set, not yet looking): the next notification goes to b
            await _notify(client, "t", 1)
            await asyncio.wait_for(a.wait(), 2)
            await _notify(client, "t", 2)
            await asyncio.wait_for(b.wait(), 2)
            assert a.take() == {1} and b.take() == {2} and not c.is_set()

            # everybody busy: the partition is kept by a busy waiter, not dropped
            for e in (a, b, c):
                e.set()
            await _notify(client, "t", 5)
            await _settle()
            assert a.take() == {5} and b.take() == set() and c.take() == set()

            # a notification naming no partition asks for a full look
            await _notify(client, "t", "retry")
            await asyncio.wait_for(a.wait(), 2)
            assert a.take() is None
            await _notify(client, "elsewhere", 1)
            await _settle()
            assert not (a.is_set() or b.is_set() or c.is_set())
        assert notifier.parked("t") == 0
    finally:
        await notifier.close()
        await client.aclose()


async def test_a_leaving_waiter_hands_on_what_it_did_not_take(redis_url):
    client = aioredis.from_url(redis_url)
    notifier = Notifier(client)
    try:
        async with (
            notifier.watch("t", "g") as a,
            notifier.watch("t", "g") as b,
            notifier.watch("t", "g") as c,
        ):
            a.hint(1)
            a.hint(2)
            notifier.pass_on("t", a, [7])  # a took partition 1's messages
            assert not a.is_set()
            assert b.take() == {1, 2, 7} and not c.is_set()
            notifier.pass_on("t", a)  # nothing left: nobody is woken
            assert not (b.is_set() or c.is_set())
            b.set()  # b is busy: c, idle, gets it
            notifier.pass_on("t", a, [4])
            assert c.take() == {4}
            a.hint(None)
            notifier.pass_on("t", a)  # a full look is handed on as one
            assert c.take() is None and b.take() == set()
    finally:
        await notifier.close()
        await client.aclose()
