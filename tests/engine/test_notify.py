"""Long-poll wake-ups: ungrouped waiters all wake, a group wakes one and passes it on."""

from __future__ import annotations

import asyncio

import redis.asyncio as aioredis

from brokers.engine.keys import notify_channel
from brokers.engine.notify import Notifier


async def _notify(client: aioredis.Redis, topic: str) -> None:
    await client.publish(notify_channel(topic), 0)


async def _settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0.01)


async def test_groups_wake_one_waiter_and_pass_it_on(redis_url):
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
            await _notify(client, "t")
            await asyncio.wait_for(a.wait(), 2)
            await _settle()
            assert (a.is_set(), b.is_set(), c.is_set()) == (True, False, False)
            assert d.is_set() and free.is_set()
            notifier.pass_on("t", a)  # a took messages: the next one looks
            assert b.is_set() and not c.is_set()
            notifier.pass_on("t", b)
            notifier.pass_on("t", c)  # each waiter at most once per notification
            assert c.is_set()
            for e in (a, b, c, d, free):
                e.clear()
            notifier.pass_on("t", c)  # nobody left who was not woken for this one
            assert not (a.is_set() or b.is_set())
            # a busy waiter (cleared, re-checking) is picked again: it will re-read
            await _notify(client, "t")
            await asyncio.wait_for(a.wait(), 2)
            assert not b.is_set()
            await _notify(client, "elsewhere")
            await _settle()
            assert not b.is_set()
        assert notifier.parked("t") == 0
    finally:
        await notifier.close()
        await client.aclose()
