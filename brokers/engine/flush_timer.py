"""When a buffer of the engine's goes to the store: at most once an interval, in a task of
its own, and never left waiting for a next write that may not come.

The traffic counters (:mod:`brokers.engine.counters`) and the client listing
(:mod:`brokers.engine.clients`) buffer what the hot paths note and write it in one
pipelined round trip; both ask for a flush with every note (:meth:`FlushTimer.request`,
a few attribute reads while one is pending), retry a failed write an interval later
(:meth:`FlushTimer.retry`) and end with :meth:`FlushTimer.close`.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable


class FlushTimer:
    """Runs ``flush`` at most once per ``interval_s`` after a :meth:`request`.

    ``eager``: a request made when the last flush this timer ran is an interval old or
    more flushes at once (what was counted after a quiet spell lands without waiting);
    otherwise a request always waits the interval (what comes in meanwhile joins it)."""

    __slots__ = ("_again", "_eager", "_flush", "_interval", "_last", "_task", "_timer")

    def __init__(
        self, flush: Callable[[], Awaitable[None]], interval_s: float, *, eager: bool = False
    ) -> None:
        self._flush = flush
        self._interval = interval_s
        self._eager = eager
        self._last = time.monotonic()
        self._timer: asyncio.TimerHandle | None = None
        self._task: asyncio.Task[None] | None = None
        self._again = False
        """A request came while a flush ran (what it buffered may have missed that
        flush): another is due an interval after it started."""

    def request(self) -> None:
        """Something was buffered: have it flushed within the interval. Without a
        running event loop nothing is scheduled (the owner's next flush writes it)."""
        if self._timer is not None:
            return
        if self._task is not None and not self._task.done():
            self._again = True
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        wait = self._interval
        if self._eager:
            wait -= time.monotonic() - self._last
            if wait <= 0:
                self._task = loop.create_task(self._run())
                return
        self._timer = loop.call_later(wait, self._due)

    def retry(self) -> None:
        """A flush failed and kept what it had: try again an interval from now, whether
        or not more is buffered meanwhile."""
        if self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self._interval, self._due)

    def _due(self) -> None:
        self._timer = None
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        self._last = time.monotonic()
        self._again = False
        try:
            await self._flush()
        finally:
            if self._again and self._timer is None:
                self._again = False
                wait = max(0.0, self._interval - (time.monotonic() - self._last))
                self._timer = asyncio.get_running_loop().call_later(wait, self._due)

    async def close(self) -> None:
        """Cancel a waiting flush and let a running one end (its errors are the owner's
        to report: the owner flushes once more itself)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._task is not None:
            with contextlib.suppress(Exception):
                await self._task
            self._task = None
        if self._timer is not None:  # the one a request during that flush left
            self._timer.cancel()
            self._timer = None
        self._again = False
