"""Batched stores: one connection's produces to one MQ, in arrival order, several per call.

Pipelined produces arrive faster than Redis round trips. Each (connection, MQ) has a
:class:`ProduceLine`: a produce joins the line and waits; one background task stores what
has queued up with a single engine call (``append_many``: each message meets the topic's
bound and the producer's rate limit as if sent alone), then the next run, so order is kept and each produce still gets
its own outcome (an invalid message fails alone). A produce whose task was cancelled
before its run started (its connection went away) is not stored.
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


@dataclass(slots=True)
class _Item:
    app: str
    message: EngineMessage
    done: asyncio.Future[None]


class ProduceLine:
    """The produces of one connection to one MQ waiting to be stored."""

    def __init__(self, ctx: ServerContext, conn: Connection, name: str, pubsub: bool) -> None:
        self.ctx, self.conn, self.name, self.pubsub = ctx, conn, name, pubsub
        self._items: deque[_Item] = deque()
        self._task: asyncio.Task[None] | None = None

    def submit(self, app: str, message: EngineMessage) -> asyncio.Future[None]:
        """Queue ``message``; the future completes once it is stored (or with its error)."""
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._items.append(_Item(app, message, done))
        if self._task is None:
            self._task = self.ctx.spawn(self._run(), f"zbus-produce-{self.name}")
        return done

    def _next_run(self) -> list[_Item]:
        run: list[_Item] = []
        size = 0
        while self._items and len(run) < MAX_BATCH:
            item = self._items[0]
            if item.done.done():  # cancelled while waiting: never stored
                self._items.popleft()
                continue
            if run and (item.app != run[0].app or size + len(item.message.body) > MAX_BATCH_BYTES):
                break
            size += len(item.message.body)
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
        try:
            results = await self.ctx.engine.append_many(
                self.name,
                run[0].app,
                [i.message for i in run],
                partition=0 if self.pubsub else None,  # pub/sub subscribers read partition 0
                qos=QoS.RECEIVED if self.pubsub else QoS.PERSISTED,
                client_address=self.conn.remote_addr,
            )
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the store failed: every produce of the run gets it
            for item in run:
                _settle(item, exc)
            return
        for item, result in zip(run, results, strict=True):
            _settle(item, result if isinstance(result, EngineError) else None)


def _settle(item: _Item, error: BaseException | None) -> None:
    if item.done.done():
        return
    if error is None:
        item.done.set_result(None)
    else:
        item.done.set_exception(error)


def line_for(ctx: ServerContext, conn: Connection, name: str, pubsub: bool) -> ProduceLine:
    """``conn``'s line for MQ ``name`` (created on demand, dropped when it runs dry)."""
    key = (name, pubsub)
    line = conn.produce_lines.get(key)
    if line is None:
        line = conn.produce_lines[key] = ProduceLine(ctx, conn, name, pubsub)
    return line
