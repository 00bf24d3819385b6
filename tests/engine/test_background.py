"""cancel_and_wait ends a task even when the task swallows a cancellation."""

from __future__ import annotations

import asyncio

from brokers.engine import cancel_and_wait


async def test_a_swallowed_cancellation_is_repeated():
    swallowed = 0

    async def stubborn() -> None:
        nonlocal swallowed
        while True:
            try:
                await asyncio.sleep(10)
            except asyncio.CancelledError:
                if swallowed >= 2:
                    raise
                swallowed += 1  # what a timeout racing the cancel does to a read loop

    task = asyncio.create_task(stubborn())
    await asyncio.sleep(0)
    await asyncio.wait_for(cancel_and_wait(task, every=0.01), 2.0)
    assert task.cancelled() and swallowed == 2


async def test_finished_and_missing_tasks_are_fine():
    async def done() -> int:
        return 1

    task = asyncio.create_task(done())
    await task
    await cancel_and_wait(task)
    await cancel_and_wait(None)
