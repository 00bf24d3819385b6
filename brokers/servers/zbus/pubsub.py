"""PubSub mode (zbus.md §9.2): a copy of each message for every matching subscriber.

Published messages are appended to partition 0 of the MQ's topic (so every broker sees
them); each subscribing connection has a cursor into that stream, set to its end by the
connection's first consume. The stretch between the cursor and the end *is* the
subscriber's buffer: bounded at ``pubsub_buffer`` messages (the cursor skips the oldest,
counted as dropped) and gone with the connection. A message matches a subscriber whose
topics contain its ``topic`` or ``*``; a message without ``topic`` reaches ``*`` only.
Non-matching messages just move the cursor. A subscriber whose peer does not read what
was written (the transport asked to pause writing) is not written to: its buffer waits,
the oldest dropped, until the peer read. Window and ``msgid`` work as for queues; the
delivered status is 200 and ``msgid_raw`` the producer's id. Each subscriber reads as its
acting app through the engine's gate (:meth:`Engine.consume_read`): while that consumer
is paused, refused or over its rate limit its buffer simply fills, and the pump looks again
every ``idle_recheck``. Otherwise a pump with nothing to send sleeps until the MQ's next
append is announced (or the safety net of :mod:`brokers.servers.caught_up`); reading the
end every 5 s cost 5,000 idle pub/sub MQs 1,000 reads a second. A runtime whose last
subscriber left leaves the server (its pump stops); the MQ's next subscriber makes a new
one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

from brokers.engine import (
    AccessDenied,
    ConsumerPaused,
    Delivery,
    EngineError,
    RateLimited,
    cancel_and_wait,
)
from brokers.protocols.zbus import AliasFamily, EncodeError, topic_matches
from brokers.servers.caught_up import RECHECK_S
from brokers.servers.zbus.connection import Connection
from brokers.servers.zbus.context import ServerContext
from brokers.servers.zbus.stored import delivery_bytes, topic_of

log = logging.getLogger("mqcloud.zbus")
READ_BATCH = 128


@dataclass(eq=False, slots=True)
class Subscriber:
    """One connection's subscription to a pub/sub MQ."""

    conn: Connection
    cursor: int
    app: str = ""
    """The app the subscriber reads as (the engine's gate decides what it gets)."""
    topics: set[str] = field(default_factory=set)
    msgid: str | None = None
    window: int = 0
    aliases: AliasFamily = AliasFamily.NONE
    dropped: int = 0

    def takes(self, record: bytes) -> bool:
        """Whether the message of ``record`` belongs in this subscriber's buffer (its
        ``topic``, read only when the subscriber's topics do not hold ``*``)."""
        # "*" first: then the record's topic is not read at all
        return "*" in self.topics or topic_matches(self.topics, topic_of(record))


@dataclass(eq=False)
class PubSubMq:
    """Subscribers and pump of one pub/sub MQ on this server."""

    ctx: ServerContext
    name: str
    subscribers: dict[Connection, Subscriber] = field(default_factory=dict)
    _event: asyncio.Event = field(default_factory=asyncio.Event)
    _task: asyncio.Task[None] | None = None
    _held: bool = False
    """The last round held a consumer back (paused, refused, over its rate limit)."""
    _joining: int = 0
    """First consumes reading the MQ's end (their subscriber not added yet)."""

    async def consume(
        self,
        conn: Connection,
        msgid: str | None,
        window: int,
        topics: list[str],
        aliases: AliasFamily,
        app: str = "",
    ) -> None:
        """Add ``topics`` to ``conn``'s subscription and (re)arm its window."""
        sub = self.subscribers.get(conn)
        if sub is None:
            self._joining += 1
            try:
                _, end = await self.ctx.engine.bounds(self.name, 0)
            finally:
                self._joining -= 1
            if conn.closed:
                self._forget_if_idle()
                return
            sub = self.subscribers.get(conn)
            if sub is None:
                sub = self.subscribers[conn] = Subscriber(conn, end, app)
                conn.on_close(lambda: self._unsubscribe(conn))
        sub.app = app
        sub.topics.update(topics)
        sub.msgid, sub.window, sub.aliases = msgid, window, aliases
        self.ctx.consumed(self.name, conn)
        self._event.set()
        if self._task is None or self._task.done():
            self._task = self.ctx.spawn(self._pump(), f"zbus-pubsub-{self.name}")

    def cursors(self) -> Counter[int]:
        """How many subscribers stand at each cursor: their buffers reach from there to the
        MQ's end (:func:`buffered_total`; ``data`` reads the end when asked, as the pump
        reads it only while a subscriber has window left)."""
        return Counter(s.cursor for s in self.subscribers.values())

    async def stop(self) -> None:
        """Stop the pump (server shutdown)."""
        if self._task is not None:
            await cancel_and_wait(self._task)

    def _unsubscribe(self, conn: Connection) -> None:
        self.subscribers.pop(conn, None)
        self._forget_if_idle()

    def _forget_if_idle(self) -> None:
        """Leave the server's MQs once no subscriber is left or joining (its pump, with
        nobody to deliver to, stops): one kept per MQ ever subscribed to would grow a
        long-lived broker with every MQ that came and went. A subscriber is added only
        to the runtime the server holds (:meth:`consume` runs on the one it looked up
        and checks :attr:`_joining` here)."""
        if self.subscribers or self._joining:
            return
        if self.ctx.pubsubs.get(self.name) is self:
            del self.ctx.pubsubs[self.name]
        if self._task is not None and not self._task.done():
            self._task.cancel()

    async def _pump(self) -> None:
        engine = self.ctx.engine
        async with engine.notifier.watch(self.name) as event:
            self._event = event
            while any(s.window != 0 for s in self.subscribers.values()):
                event.clear()
                try:
                    progressed = await self._round()
                except EngineError as exc:
                    log.warning("zbus pubsub %s: %s", self.name, exc)
                    await asyncio.sleep(0.5)
                    continue
                if not progressed:
                    # appends are announced: with nobody held back, only the safety net
                    wait = self.ctx.config.idle_recheck if self._held else RECHECK_S
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(wait):
                            await event.wait()

    async def _round(self) -> bool:
        engine, cap = self.ctx.engine, self.ctx.config.pubsub_buffer
        start, end = await engine.bounds(self.name, 0)
        reads: dict[tuple[str, str, int], list[Delivery]] = {}
        held: set[tuple[str, str]] = set()
        progressed = False
        for sub in list(self.subscribers.values()):
            if sub.window == 0 or sub.conn.closed:
                continue
            if sub.conn.writing_paused:  # its buffer waits until its peer read
                sub.conn.when_writable(self, self._event.set)
                continue
            floor = max(start, end - cap)
            if sub.cursor < floor:
                sub.dropped += floor - sub.cursor
                sub.cursor = floor
            if sub.cursor >= end:
                continue
            consumer = (sub.app, sub.conn.remote_host)
            if consumer in held:
                continue
            batch = reads.get((*consumer, sub.cursor))
            if batch is None:
                try:
                    batch = await engine.consume_read(
                        self.name,
                        sub.app,
                        0,
                        sub.cursor,
                        READ_BATCH,
                        address=consumer[1],
                        messages=True,
                    )
                except (AccessDenied, ConsumerPaused, RateLimited):
                    held.add(consumer)  # its buffer waits (bounded, oldest dropped)
                    continue
                reads[(*consumer, sub.cursor)] = batch
            progressed |= self._deliver(sub, batch)
        self._held = bool(held)
        return progressed

    def _deliver(self, sub: Subscriber, batch: list[Delivery]) -> bool:
        sub.conn.cork()  # the subscriber's share of the batch goes out in one write
        try:
            return self._deal(sub, batch)
        finally:
            sub.conn.uncork()

    def _deal(self, sub: Subscriber, batch: list[Delivery]) -> bool:
        moved = False
        for d in batch:
            if sub.window == 0:
                break
            if d.index < sub.cursor:
                continue
            sub.cursor = d.index + d.count
            moved = True
            if not sub.takes(d.record):
                continue
            try:
                out = delivery_bytes(d.record, msgid=sub.msgid, status=200, aliases=sub.aliases)
            except EncodeError:  # headers are filtered to writable ones: a bug, not input
                log.exception("zbus pubsub %s: cannot encode message %d", self.name, d.index)
                continue
            if not sub.conn.send_encoded(out):
                return moved
            if sub.window > 0:
                sub.window -= 1
        return moved


def buffered_total(cursors: Mapping[int, int], start: int, end: int, cap: int) -> int:
    """What subscribers standing at ``cursors`` (cursor → how many) have buffered in a
    stream holding ``start``..``end``: each at most ``cap`` (the oldest are dropped)."""
    floor = max(start, end - cap)
    return sum(n * max(0, end - max(cursor, floor)) for cursor, n in cursors.items())


def pubsub_for(ctx: ServerContext, name: str) -> PubSubMq:
    """The runtime of pub/sub MQ ``name`` on this server (created on first use)."""
    mq = ctx.pubsubs.get(name)
    if mq is None:
        mq = ctx.pubsubs[name] = PubSubMq(ctx, name)
    return mq
