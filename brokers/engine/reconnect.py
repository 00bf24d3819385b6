"""Running a command once more on a fresh connection when the one it used was dead.

After Redis restarted, a connection that sat idle in a pool (or the multiplexed one, caught
with requests in flight) fails the next command with "Connection closed by server" although
Redis is up again. :func:`retry_on_fresh_connection` runs such a command a second time: the
failed connection has been dropped by then, and the pool hands out a connected one
(:func:`brokers.engine.redisio.engine_client` keeps redis-py's check of idle connections on).

Only a command that is safe to repeat may go through here: a read, or a script that is
idempotent per request (the append script remembers its request ids, see
:mod:`brokers.engine.append`). Retried: a connection that was closed, reset or refused.
Not retried: a timeout (the command may still be running; the caller's own deadline has
passed anyway) and a pool that had no free connection for its whole wait.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from brokers.engine.errors import StoreUnavailable

log = logging.getLogger(__name__)
T = TypeVar("T")
STALE = (RedisConnectionError, ConnectionResetError, BrokenPipeError, ConnectionAbortedError)
REDIS_DOWN = (RedisConnectionError, RedisTimeoutError, OSError)
"""What an unreachable (or unanswering) Redis raises: the engine reports it as
:class:`~brokers.engine.errors.StoreUnavailable` (:func:`store_errors`)."""


def store_errors(method: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    """``method`` reporting an unreachable Redis as StoreUnavailable (every public
    coroutine of the engine's facade and of its mailboxes)."""

    @functools.wraps(method)
    async def guarded(*args: Any, **kwargs: Any) -> Any:
        try:
            return await method(*args, **kwargs)
        except REDIS_DOWN as exc:
            raise StoreUnavailable(f"Redis unavailable: {exc}") from exc

    return guarded


def log_retried(
    logger: logging.Logger,
    exc: BaseException,
    message: str,
    *args: object,
    unexpected: int = logging.WARNING,
) -> None:
    """Log a background task's Redis work that failed and will be retried: a warning of
    one line naming the error when Redis is down or restarting (:data:`REDIS_DOWN`: an
    outage, which every background task meets at once — a traceback each said nothing
    more); with the traceback, at level ``unexpected``, for anything else."""
    if isinstance(exc, REDIS_DOWN):
        logger.warning(message + " (%s)", *args, exc)
    else:
        logger.log(unexpected, message, *args, exc_info=exc)


def is_stale(exc: BaseException) -> bool:
    """Whether ``exc`` says the connection was dead (not that Redis was slow)."""
    if not isinstance(exc, STALE):
        return False
    # BlockingConnectionPool: "No connection available." after waiting its whole timeout
    return not isinstance(exc.__cause__, asyncio.TimeoutError | TimeoutError)


async def retry_on_fresh_connection(attempt: Callable[[bool], Awaitable[T]]) -> T:
    """``attempt(False)``; when its connection turned out dead, ``attempt(True)`` once.

    The flag tells the attempt it is the repeat (the append script then checks whether
    the first one was stored after all). A repeat that fails too raises its own error.
    """
    try:
        return await attempt(False)
    except STALE as exc:
        if not is_stale(exc):
            raise
        log.info("Redis connection was dead (%s): trying once more on a fresh one", exc)
        return await attempt(True)
