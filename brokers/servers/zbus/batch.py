"""Batched stores: one connection's produces to one MQ, in arrival order, several per call.

Pipelined produces arrive faster than Redis round trips. Each (connection, MQ) has a
:class:`ProduceLine`: produces join the line — one at a time (:meth:`ProduceLine.submit`)
or as a run decoded together (:meth:`ProduceLine.submit_many`) — and wait; one background
task stores what has queued up with a single engine call (``append_many``: each message
meets the topic's bound and the producer's rate limit as if sent alone), then the next
run, so order is kept and each produce still gets its own outcome (an invalid message
fails alone). Produces whose future was cancelled before their run started (their
connection went away) are not stored.
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass

from brokers.engine import EngineError, QoS
from brokers.engine import Message as EngineMessage
from brokers.servers.zbus.connection import Connection
from brokers.servers.zbus.context import ServerContext

MAX_BATCH = 256
"""Messages per engine call."""
MAX_BATCH_BYTES = 1 << 20
"""Body bytes per engine call (a larger single message still goes alone)."""


Outcomes = list[BaseException | None]
"""Per message of a submission: None (stored) or the error it met."""


@dataclass(slots=True)
class _Item:
    app: str
    messages: list[EngineMessage]
    size: int
    done: asyncio.Future[Outcomes]


class ProduceLine:
    """The produces of one connection to one MQ waiting to be stored."""

    def __init__(self, ctx: ServerContext, conn: Connection, name: str, pubsub: bool) -> None:
        self.ctx, self.conn, self.name, self.pubsub = ctx, conn, name, pubsub
        self._items: deque[_Item] = deque()
        self._task: asyncio.Task[None] | None = None

    def submit_many(self, app: str, messages: list[EngineMessage]) -> asyncio.Future[Outcomes]:
        """Queue ``messages`` (at most :data:`MAX_BATCH`, stored in one run); the future
        gives each one's outcome once they are stored. Cancel it to withdraw them before
        their run starts."""
        done: asyncio.Future[Outcomes] = asyncio.get_running_loop().create_future()
        size = sum(len(m.body) for m in messages)
        self._items.append(_Item(app, messages, size, done))
        if self._task is None:
            self._task = self.ctx.spawn(self._run(), f"zbus-produce-{self.name}")
        return done

    async def submit(self, app: str, message: EngineMessage) -> None:
        """Queue ``message`` and wait until it is stored (raising the error it met)."""
        done = self.submit_many(app, [message])
        try:
            (error,) = await done
        except asyncio.CancelledError:
            done.cancel()
            raise
        if error is not None:
            raise error

    def _next_run(self) -> list[_Item]:
        run: list[_Item] = []
        count = size = 0
        while self._items:
            item = self._items[0]
            if item.done.done():  # cancelled while waiting: never stored
                self._items.popleft()
                continue
            if run and (
                item.app != run[0].app
                or count + len(item.messages) > MAX_BATCH
                or size + item.size > MAX_BATCH_BYTES
            ):
                break
            count += len(item.messages)
            size += item.size
            run.append(self._items.popleft())
        return run

    async def _run(self) -> None:
        run: list[_Item] = []
        try:
            while self._items:
                run = self._next_run()
                if run:
                    await self._store(run)
                run = []
        finally:
            for item in [*run, *self._items]:
                if not item.done.done():
                    item.done.cancel()
            self._items.clear()
            self._task = None
            key = (self.name, self.pubsub)
            if self.conn.produce_lines.get(key) is self:
                del self.conn.produce_lines[key]

    async def _store(self, run: list[_Item]) -> None:
        messages = [m for item in run for m in item.messages]
        try:
            results = await self.ctx.engine.append_many(
                self.name,
                run[0].app,
                messages,
                partition=0 if self.pubsub else None,  # pub/sub subscribers read partition 0
                qos=QoS.RECEIVED if self.pubsub else QoS.PERSISTED,
                client_address=self.conn.remote_addr,
            )
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the store failed: every produce of the run gets it
            for item in run:
                if not item.done.done():
                    item.done.set_result([exc] * len(item.messages))
            return
        at = 0
        for item in run:
            n = len(item.messages)
            if not item.done.done():
                item.done.set_result(
                    [r if isinstance(r, EngineError) else None for r in results[at : at + n]]
                )
            at += n


def line_for(ctx: ServerContext, conn: Connection, name: str, pubsub: bool) -> ProduceLine:
    """``conn``'s line for MQ ``name`` (created on demand, dropped when it runs dry)."""
    key = (name, pubsub)
    line = conn.produce_lines.get(key)
    if line is None:
        line = conn.produce_lines[key] = ProduceLine(ctx, conn, name, pubsub)
    return line
