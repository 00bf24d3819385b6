"""Stopping background tasks reliably.

A pub/sub loop reading with a timeout can lose a cancellation: when the task is cancelled
while the read's own timeout fires, the timeout machinery may turn the cancellation into
its timeout and the loop goes round again. A plain ``task.cancel(); await task`` then
waits forever (seen as a hung test teardown). :func:`cancel_and_wait` cancels again until
the task has really ended.
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
