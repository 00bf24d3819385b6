"""FlushTimer: at most one flush per interval, none lost to a quiet spell, eager or not,
a failed flush tried again, and nothing left running after close."""

from __future__ import annotations

import asyncio

from brokers.engine.flush_timer import FlushTimer


class Flushes:
    def __init__(self) -> None:
        self.times: list[float] = []
        self.fail = False

    async def __call__(self) -> None:
        self.times.append(asyncio.get_running_loop().time())
        if self.fail:
            raise OSError("store down")


async def test_requests_within_an_interval_make_one_flush_after_it():
    flushes = Flushes()
    timer = FlushTimer(flushes, 0.05)
    start = asyncio.get_running_loop().time()
    for _ in range(100):
        timer.request()
    await asyncio.sleep(0.12)
    assert len(flushes.times) == 1 and flushes.times[0] - start >= 0.045
    await timer.close()


async def test_an_eager_timer_flushes_at_once_after_a_quiet_spell():
    flushes = Flushes()
    timer = FlushTimer(flushes, 0.05, eager=True)
    await asyncio.sleep(0.06)  # an interval since it was made
    start = asyncio.get_running_loop().time()
    timer.request()
    await asyncio.sleep(0.01)
    assert len(flushes.times) == 1 and flushes.times[0] - start < 0.01
    timer.request()  # just after: waits for the rest of the interval
    await asyncio.sleep(0.01)
    assert len(flushes.times) == 1
    await asyncio.sleep(0.08)
    assert len(flushes.times) == 2
    await timer.close()


async def test_a_retry_flushes_again_without_a_request():
    flushes = Flushes()
    timer = FlushTimer(flushes, 0.03)
    timer.retry()
    await asyncio.sleep(0.08)
    assert len(flushes.times) == 1
    await timer.close()


async def test_close_cancels_a_waiting_flush_and_swallows_a_running_ones_error():
    flushes = Flushes()
    timer = FlushTimer(flushes, 0.03)
    timer.request()
    await timer.close()
    await asyncio.sleep(0.06)
    assert flushes.times == []
    flushes.fail = True
    eager = FlushTimer(flushes, 0.0, eager=True)
    eager.request()  # a task at once, which fails
    await eager.close()
    assert len(flushes.times) == 1


def test_a_request_without_a_running_loop_schedules_nothing():
    FlushTimer(Flushes(), 0.01).request()


async def test_a_request_while_a_flush_runs_gets_a_flush_of_its_own():
    """What is buffered while a flush awaits the store may have missed it: one more flush
    follows, an interval after the running one started, with no further request (the
    last produces of a burst were otherwise left until the next produce, maybe never)."""
    release = asyncio.Event()
    flushes = Flushes()

    async def slow() -> None:
        await flushes()
        if len(flushes.times) == 1:
            await release.wait()

    timer = FlushTimer(slow, 0.03, eager=True)
    await asyncio.sleep(0.04)
    timer.request()  # eager: flushes at once, and waits for the store
    await asyncio.sleep(0.01)
    assert len(flushes.times) == 1
    for _ in range(5):
        timer.request()  # buffered while it runs
    release.set()
    await asyncio.sleep(0.08)
    assert len(flushes.times) == 2
    assert flushes.times[1] - flushes.times[0] >= 0.025
    await asyncio.sleep(0.06)
    assert len(flushes.times) == 2  # nothing more was asked for
    await timer.close()


async def test_close_during_a_flush_leaves_no_flush_behind():
    release = asyncio.Event()
    flushes = Flushes()

    async def slow() -> None:
        await flushes()
        await release.wait()

    timer = FlushTimer(slow, 0.01, eager=True)
    await asyncio.sleep(0.02)
    timer.request()
    await asyncio.sleep(0)
    timer.request()  # during the flush: would ask for one more
    closing = asyncio.ensure_future(timer.close())
    await asyncio.sleep(0.01)
    release.set()
    await closing
    await asyncio.sleep(0.05)
    assert len(flushes.times) == 1
