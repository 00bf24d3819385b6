"""Script calls issued in the same event-loop turn go to a single Redis in ONE write.

A broker under load runs many requests at once, and each engine operation is one or two
script calls. Sent one by one, every call pays redis-py's connection-pool round (locks,
bookkeeping) and a send and a receive system call of its own — on a busy broker that was
most of its CPU. Calls made while the loop is running other callbacks are queued and
written together at the end of the turn on the client's :class:`~brokers.engine.multiplex.
Multiplexer` connection (without waiting for earlier turns' replies); each caller gets its
own reply or its own error (a NOSCRIPT error stays the caller's, who falls back to EVAL).

Only for a single Redis: on Redis Cluster the calls are sent directly (each to its slot's
node). Scripts are independent, so their order inside a turn does not matter beyond what
Redis guarantees anyway: one connection executes them in the order queued.
"""

from __future__ import annotations

import asyncio
import weakref
from typing import Any

import redis.asyncio as aioredis

from brokers.engine.multiplex import Multiplexer


class Coalescer:
    """Queues commands for one client and flushes them once per loop turn."""

    def __init__(self, client: aioredis.Redis, loop: asyncio.AbstractEventLoop) -> None:
        self._ref = weakref.ref(client)
        self.loop = loop
        self._queue: list[tuple[tuple[Any, ...], asyncio.Future[Any]]] = []
        self._mux = Multiplexer(client, loop)

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
        self._mux.send(batch)


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
