"""Stopping background tasks reliably.

A task can lose a cancellation. Python 3.11's ``asyncio.wait_for`` returns the awaited
result when the operation finishes in the same turn as the cancellation, and the
cancellation is gone; redis-py awaits its socket writes through ``wait_for`` whenever a
socket timeout is set, among them the ``HELLO`` of every (re)connection — and a command
cancelled mid-way drops its connection, so the next command reconnects (reproduced: a
loop of HSETs cancelled at random moments lost 3 cancellations in 3,000). A
pub/sub read's own timeout can turn a cancellation into that timeout the same way. A
plain ``task.cancel(); await task`` then waits forever (seen as a hung test teardown,
and as an HTTP-MQ process that never finished its graceful stop). :func:`cancel_and_wait`
cancels again until the task has really ended.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

log = logging.getLogger(__name__)


async def cancel_and_wait(task: asyncio.Task[object] | None, *, every: float = 0.2) -> None:
    """Cancel ``task`` and wait until it is done, re-cancelling every ``every`` seconds."""
    if task is None:
        return
    while not task.done():
        task.cancel()
        await asyncio.wait({task}, timeout=every)
    if not task.cancelled():
        exc = task.exception()
        if exc is not None:
            log.warning("background task %s ended with %r", task.get_name(), exc)
    with contextlib.suppress(asyncio.CancelledError, Exception):
        task.result()
