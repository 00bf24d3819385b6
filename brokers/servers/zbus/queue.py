"""MQ mode (zbus.md §9.1, §13.1): pull sessions served round-robin from an engine queue.

A zbus queue MQ is partition 0 of a catalog topic used through the engine's queue
operations: ``queue_publish`` stores, ``queue_take`` leases (the message stays stored, *in
flight*), ``queue_ack`` settles and ``queue_release`` puts it back at the head. One
:class:`QueueMq` per MQ and server keeps the pull sessions (one per connection, a new
consume replaces it) and a pump task that takes messages while some session has window
left, parked on the engine's notifier otherwise (no busy polling). It takes for each
consumer of its sessions — (acting app, client host) — through the engine's gate, so a
paused, refused or rate-limited consumer's sessions simply wait.

Settling (§13.1):

* A connection that re-sends a consume while its previous one is still parked, at least
  ``MIN_LEARN`` seconds later, has shown its local timeout T. Its later parked consumes
  (window ≥ 1) are retired silently at ``retire_fraction``·T, so every delivery reaches it
  before its timer fires, and its in-flight messages are settled by its next consume.
* A connection that never showed a timeout may still be racing its first one: an in-flight
  message delivered in the last (1 − f) of the assumed timeout G (``client_timeout_guess``)
  and followed by a new consume within (1 − f)·G is released (delivered again, marked
  ``redelivered: 1``); others are settled by the next consume.
* Streaming sessions (window −1) settle a delivery once the transport's buffer has drained
  (checked after each dispatch round and at the next consume; a close before that releases).
* A closed connection releases everything it had in flight.

The ``redelivered`` mark of a released message is kept in a Redis set per MQ (any broker may
deliver it next); a message whose engine lease expired carries ``attempts`` > 1 and is marked
too.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from dataclasses import dataclass, field

from brokers.engine import (
    AccessDenied,
    Delivery,
    EngineError,
    QueueStats,
    RateLimited,
    cancel_and_wait,
)
from brokers.protocols.zbus import AliasFamily, make_delivery
from brokers.servers.zbus.connection import Connection
from brokers.servers.zbus.context import ServerContext
from brokers.servers.zbus.stored import from_record

log = logging.getLogger("mqcloud.zbus")

MIN_LEARN = 0.5
"""A re-sent parked consume teaches a timeout only if it came at least this late (seconds)."""


def redelivered_key(mq: str) -> str:
    """Redis set of the MQ's released indexes, to mark their next delivery."""
    return f"zbus:redelivered:{{{mq}}}"


@dataclass(eq=False, slots=True)
class PullSession:
    """The current consume of one connection on one MQ."""

    conn: Connection
    msgid: str | None
    window: int
    """Deliveries left; −1 streams."""
    aliases: AliasFamily
    app: str
    parked_at: float
    address: str = ""
    """The client's host: with ``app``, the consumer the pump takes for."""
    delivered: int = 0
    active: bool = True
    timer: asyncio.TimerHandle | None = None


@dataclass(slots=True)
class InFlight:
    """A delivered, unsettled queue message."""

    index: int
    delivered_at: float
    parked_at: float
    streaming: bool


@dataclass(eq=False)
class QueueMq:
    """The sessions and pump of one queue MQ on this server."""

    ctx: ServerContext
    name: str
    sessions: dict[Connection, PullSession] = field(default_factory=dict)
    line: deque[PullSession] = field(default_factory=deque)
    inflight: dict[Connection, list[InFlight]] = field(default_factory=dict)
    _event: asyncio.Event = field(default_factory=asyncio.Event)
    _task: asyncio.Task[None] | None = None
    _watched: set[Connection] = field(default_factory=set)
    _blocked: dict[tuple[str, str], float] = field(default_factory=dict)
    """Consumer → monotonic time before which it is not taken for (rate limit, refusal)."""

    # ------------------------------------------------------------------ consume

    async def consume(
        self, conn: Connection, msgid: str | None, window: int, aliases: AliasFamily, app: str
    ) -> None:
        """Replace ``conn``'s pull session (§9.1) and settle what it had in flight."""
        now = conn.now()
        previous = self.sessions.pop(conn, None)
        if previous is not None:
            if previous.active and previous.delivered == 0 and previous.window > 0:
                waited = now - previous.parked_at
                if waited >= MIN_LEARN:
                    conn.learned_timeout = waited
            self._deactivate(previous)
        await self._settle(conn, now)
        if conn.closed:
            return
        self._watch(conn)
        self.ctx.consumed(self.name, conn)
        session = PullSession(conn, msgid, window, aliases, app, now, conn.remote_host)
        self.sessions[conn] = session
        if window == 0:
            return
        self.line.append(session)
        if window > 0 and conn.learned_timeout is not None:
            delay = conn.learned_timeout * self.ctx.config.retire_fraction
            session.timer = asyncio.get_running_loop().call_later(delay, self._retire, session)
        self._kick()

    def parked(self) -> int:
        """Sessions waiting for messages."""
        return sum(1 for s in self.line if s.active)

    def _retire(self, session: PullSession) -> None:
        session.timer = None
        self._deactivate(session)

    def _deactivate(self, session: PullSession) -> None:
        session.active = False
        if session.timer is not None:
            session.timer.cancel()
            session.timer = None
        with contextlib.suppress(ValueError):
            self.line.remove(session)

    def _watch(self, conn: Connection) -> None:
        if conn not in self._watched:
            self._watched.add(conn)
            conn.on_close(lambda: self._closed(conn))

    def _closed(self, conn: Connection) -> None:
        self._watched.discard(conn)
        session = self.sessions.pop(conn, None)
        if session is not None:
            self._deactivate(session)
        items = self.inflight.pop(conn, [])
        if items:
            self.ctx.spawn(self._release([i.index for i in items]), f"zbus-release-{self.name}")

    # ------------------------------------------------------------------ settling

    async def _settle(self, conn: Connection, now: float) -> None:
        items = self.inflight.pop(conn, [])
        if not items:
            return
        cfg = self.ctx.config
        guess, frac = cfg.client_timeout_guess, cfg.retire_fraction
        settle, again = [], []
        for item in items:
            late = item.delivered_at - item.parked_at >= frac * guess
            racing = now - item.delivered_at < (1 - frac) * guess
            if not item.streaming and conn.learned_timeout is None and late and racing:
                again.append(item.index)
            else:
                settle.append(item.index)
        if settle:
            await self.ctx.engine.queue_ack(self.name, settle)
        if again:
            await self._release(again)

    async def _release(self, indexes: list[int]) -> None:
        redis = self.ctx.engine.redis
        await redis.sadd(redelivered_key(self.name), *indexes)
        await self.ctx.engine.queue_release(self.name, indexes)

    def _settle_streams(self) -> None:
        done: list[int] = []
        for conn, items in list(self.inflight.items()):
            if conn.buffered() != 0:
                continue
            keep = [i for i in items if not i.streaming]
            done.extend(i.index for i in items if i.streaming)
            if keep:
                self.inflight[conn] = keep
            else:
                del self.inflight[conn]
        if done:
            self.ctx.spawn(self.ctx.engine.queue_ack(self.name, done), f"zbus-ack-{self.name}")

    # ------------------------------------------------------------------ pump

    def _kick(self) -> None:
        self._event.set()
        if self._task is None or self._task.done():
            self._task = self.ctx.spawn(self._pump(), f"zbus-queue-{self.name}")

    async def stop(self) -> None:
        """Stop the pump (server shutdown)."""
        if self._task is not None:
            await cancel_and_wait(self._task)

    async def _pump(self) -> None:
        engine, cfg = self.ctx.engine, self.ctx.config
        async with engine.notifier.watch(self.name) as event:
            self._event = event
            while self.line:
                event.clear()
                wants: dict[tuple[str, str], int] = {}
                for s in self.line:
                    key = (s.app, s.address)
                    if wants.get(key, 0) < cfg.take_batch and self._ready(key):
                        want = wants.get(key, 0) + (cfg.take_batch if s.window < 0 else s.window)
                        wants[key] = min(want, cfg.take_batch)
                progressed = False
                for (app, address), want in wants.items():
                    try:
                        got = await engine.queue_take(
                            self.name, app, address=address, count=want, lease_ms=cfg.lease_ms
                        )
                    except RateLimited as exc:
                        self._block((app, address), exc.retry_after_ms / 1000)
                        continue
                    except AccessDenied as exc:  # its policy went away: its sessions wait
                        log.info("zbus queue %s: %s", self.name, exc)
                        self._block((app, address), 1.0)
                        continue
                    except EngineError as exc:
                        log.warning("zbus queue %s: %s", self.name, exc)
                        await asyncio.sleep(0.5)
                        continue
                    if got:
                        await self._dispatch(got, (app, address))
                        progressed = True
                if progressed:
                    continue
                wait = cfg.idle_recheck
                if self._blocked:
                    wait = min(wait, max(0.01, min(self._blocked.values()) - time.monotonic()))
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(event.wait(), wait)

    def _ready(self, key: tuple[str, str]) -> bool:
        until = self._blocked.get(key)
        if until is None:
            return True
        if time.monotonic() >= until:
            del self._blocked[key]
            return True
        return False

    def _block(self, key: tuple[str, str], seconds: float) -> None:
        self._blocked[key] = time.monotonic() + seconds

    def _next_session(self, key: tuple[str, str]) -> PullSession | None:
        """The next session in line of the consumer ``key`` (others keep their turn)."""
        skipped: list[PullSession] = []
        found = None
        while self.line:
            session = self.line.popleft()
            if not session.active or session.conn.closed:
                continue
            if (session.app, session.address) != key:
                skipped.append(session)
                continue
            found = session
            break
        self.line.extendleft(reversed(skipped))
        return found

    async def _dispatch(self, deliveries: list[Delivery], consumer: tuple[str, str]) -> None:
        redis = self.ctx.engine.redis
        marks_key = redelivered_key(self.name)
        pipe = redis.pipeline(transaction=False)
        for d in deliveries:
            pipe.srem(marks_key, d.index)
        marks = await pipe.execute()
        leftover: list[int] = []
        now = Connection.now()
        for d, marked in zip(deliveries, marks, strict=True):
            session = self._next_session(consumer)
            if session is None:
                leftover.append(d.index)
                continue
            stored = from_record(d.record)
            out = make_delivery(
                stored, msgid=session.msgid, redelivered=bool(marked) or d.attempts > 1
            )
            if not session.conn.send(out, session.aliases):
                self._deactivate(session)
                leftover.append(d.index)
                continue
            session.delivered += 1
            streaming = session.window < 0
            self.inflight.setdefault(session.conn, []).append(
                InFlight(d.index, now, session.parked_at, streaming)
            )
            if not streaming:
                session.window -= 1
            if session.window != 0:
                self.line.append(session)
            else:
                self._deactivate(session)
        if leftover:
            await self.ctx.engine.queue_release(self.name, leftover)
        self._settle_streams()

    # ------------------------------------------------------------------ stats

    async def stats(self) -> QueueStats:
        """The engine's counts for this queue."""
        return await self.ctx.engine.queue_stats(self.name)


def queue_for(ctx: ServerContext, name: str) -> QueueMq:
    """The runtime of queue MQ ``name`` on this server (created on first use)."""
    mq = ctx.queues.get(name)
    if mq is None:
        mq = ctx.queues[name] = QueueMq(ctx, name)
    return mq
