"""Script calls issued in the same event-loop turn go to a single Redis in ONE write.

A broker under load runs many requests at once, and each engine operation is one or two
script calls. Sent one by one, every call pays redis-py's connection-pool round (locks,
bookkeeping) and a send and a receive system call of its own — on a busy broker that was
most of its CPU. Calls made while the loop is running other callbacks are queued and
written together at the end of the turn on the client's :class:`~brokers.engine.multiplex.
Multiplexer` connection (without waiting for earlier turns' replies); each caller gets its
own reply or its own error (a NOSCRIPT error stays the caller's, who falls back to EVAL).
A client with a connection class of its own uses a non-transactional redis-py pipeline
per turn instead.

Only for a single Redis: on Redis Cluster the calls are sent directly (each to its slot's
node). Scripts are independent, so their order inside a pipeline does not matter beyond
what Redis guarantees anyway: one connection executes them in the order queued.
"""

from __future__ import annotations

import asyncio
import weakref
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError

from brokers.engine.multiplex import Multiplexer, supports

MAX_BATCH = 128


class Coalescer:
    """Queues commands for one client and flushes them once per loop turn."""

    def __init__(self, client: aioredis.Redis, loop: asyncio.AbstractEventLoop) -> None:
        self._ref = weakref.ref(client)
        self.loop = loop
        self._queue: list[tuple[tuple[Any, ...], asyncio.Future[Any]]] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._mux = Multiplexer(client, loop) if supports(client) else None

    @property
    def client(self) -> aioredis.Redis | None:
        return self._ref()

    def call(self, *command: Any) -> asyncio.Future[Any]:
        """Queue ``command``; the future resolves to its reply (or raises its error)."""
        fut = self.loop.create_future()
        if not self._queue:
            self.loop.call_soon(self._flush)
        self._queue.append((command, fut))
        return fut

    def _flush(self) -> None:
        batch, self._queue = self._queue, []
        if self._mux is not None:
            self._mux.send(batch)
            return
        while batch:
            chunk, batch = batch[:MAX_BATCH], batch[MAX_BATCH:]
            task = self.loop.create_task(self._send(chunk))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _send(self, chunk: list[tuple[tuple[Any, ...], asyncio.Future[Any]]]) -> None:
        try:
            client = self._ref()
            if client is None:  # callers hold the client while they wait: not reached
                raise RedisConnectionError("the Redis client was closed")
            if len(chunk) == 1:
                replies = [await client.execute_command(*chunk[0][0])]
            else:
                pipe = client.pipeline(transaction=False)
                for command, _ in chunk:
                    pipe.execute_command(*command)
                replies = await pipe.execute(raise_on_error=False)
        except asyncio.CancelledError:
            for _, fut in chunk:
                fut.cancel()
            raise
        except Exception as exc:  # the connection failed: every caller hears of it
            for _, fut in chunk:
                if not fut.done():
                    fut.set_exception(exc)
            return
        for (_, fut), reply in zip(chunk, replies, strict=True):
            if fut.done():
                continue
            if isinstance(reply, Exception):
                fut.set_exception(reply)
            else:
                fut.set_result(reply)


# id(client) -> coalescer; the entry goes with the client (a WeakKeyDictionary lookup
# builds a weak reference per call, which showed in profiles of a busy broker).
_coalescers: dict[int, Coalescer] = {}


def coalescer(client: aioredis.Redis) -> Coalescer:
    """The coalescer of ``client`` on the running loop."""
    loop = asyncio.get_running_loop()
    key = id(client)
    found = _coalescers.get(key)
    if found is None or found.loop is not loop or found.client is not client:
        found = _coalescers[key] = Coalescer(client, loop)
        weakref.finalize(client, _coalescers.pop, key, None)
    return found
