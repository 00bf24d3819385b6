"""MQ mode (zbus.md §9.1, §13.1): pull sessions served round-robin from consumer groups.

A zbus queue MQ is a catalog topic consumed through the engine's consumer groups, like
every topic by every protocol: a session consumes as its acting app (its token's app, or
the topic's anonymous app), so it gets what any producer stored — JMQ4, HTTP-MQ, VibeMQ
or zbus. ``lease`` hands out a batch (the messages stay stored, *in flight*), ``settle``
acks them and ``release`` puts them back to be delivered again. One :class:`QueueMq` per MQ
and server keeps the pull sessions (one per connection, a new consume replaces it) and a
pump task that leases while some session has window left, parked on the engine's
notifier otherwise (no busy polling). It leases for each consumer of its sessions —
(acting app, client host) — through the engine's gate, so a paused, refused or
rate-limited consumer's sessions simply wait, and deals the batch round-robin to that
consumer's sessions. A consumer whose lease left nothing servable (it found nothing,
or the engine said nothing more is there) is not leased for again on its next consume (a
caught-up long poller cost an empty lease per poll) but on the MQ's next notification —
an append, a release that made messages due, an offset reset — or when the lease said
something may be due (a retry after its backoff, another lessee's expiry), on a catalog
change that concerns it, or at the safety net's recheck (:mod:`brokers.servers.caught_up`);
a pump with nothing due sleeps until then. A session whose peer does not read what was
written (the transport asked to pause writing) is not dealt to until it did: a streaming
consumer that stops reading does not pull the backlog into the broker's memory.

Read-ahead: the pump leases what its sessions want plus what the consumer took in the
last ``read_ahead_hold`` seconds (its pace since its previous lease), up to a batch
(``take_batch``), while the process's read-ahead budget (:mod:`brokers.servers.readahead`)
is open. What the parked sessions do not take waits in memory for the consumer's next
sessions — a long-polling client (window 1) is dealt from memory as its consume is
decoded, instead of costing a lease or a pump round each (while no session of the MQ
waits, without entering the line: :meth:`QueueMq._poll_from_memory`) — for at most
``read_ahead_hold`` seconds, then goes back to the group unread (not marked
redelivered); what does not fit in the budget goes back at once. Leasing by pace
keeps a slow poller (one message a second) from leasing a batch per poll only to hand
back all but one of it: that cost two scripts reading a batch each, and counted the
batch as consumed traffic.
The engine's gate is asked again before memory is dealt (its answer for a consume just
decoded is the one that consume got: :func:`.consume.consume_now` keeps it per catalog
version), so a pause or a revoked policy holds those messages back at once. Settles of
``settle_delay`` (50 ms), from every connection, go to the engine as one call per (group,
partition) — a long poller settles one message per consume, and a fleet of MQs each
polled a few times a second sent one call per message at 5 ms — or at once when
``settle_batch`` wait; fewer than ``settle_gather`` wait on for company up to
``settle_max_delay`` (at fleet size each MQ is polled a few times a second: 50 ms alone
still meant a call per ack or two); a stopping server sends what is pending at once; a
consume does not wait for its previous delivery's ack (an ack or a give-back Redis missed
is made again by the engine once it answers: :mod:`brokers.engine.kept_settles`). A
consume that only acks is done as it is decoded (:meth:`QueueMq.consume_now`); one that
releases first runs as a task (:meth:`QueueMq.consume`). Deliveries are framed
straight from the record (:func:`~.stored.delivery_bytes`).

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
  (looked at ``drain_check_delay`` after a dispatch round, again while bytes wait, and at the
  next consume; a close before that releases).
* A closed connection releases everything it had in flight.

A runtime leaves the server once nothing of it is left — every connection that consumed
the MQ closed, nothing in flight, read ahead or waiting to be settled, its pump ended
(:meth:`QueueMq._forget_if_idle`); the MQ's next consumer makes a new one. One kept per MQ
ever consumed would grow a long-lived broker with every MQ that came and went.

The engine marks a message delivered before (released, or its lease expired) as
``redelivered``; this server keeps no Redis data of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections import deque
from dataclasses import dataclass, field

from brokers.engine import (
    AccessDenied,
    Delivery,
    EngineError,
    RateLimited,
    cancel_and_wait,
)
from brokers.protocols.zbus import AliasFamily, EncodeError
from brokers.servers import turnwrite
from brokers.servers.caught_up import CaughtUp
from brokers.servers.readahead import Paces
from brokers.servers.zbus.connection import Connection
from brokers.servers.zbus.context import ServerContext
from brokers.servers.zbus.stored import delivery_bytes

log = logging.getLogger("mqcloud.zbus")

MIN_LEARN = 0.5
"""A re-sent parked consume teaches a timeout only if it came at least this late (seconds)."""
PUMP_IDLE = 1.0
"""A pump with no session waits this long (seconds) for one before it ends."""
PUMP_RESTART_S = 1.0
"""A pump that stopped on an unexpected error starts again after this many seconds."""
STREAMS_RECHECK_MAX = 1.0
"""The longest wait (seconds) between looks at a streaming transport that does not drain."""


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
    """A delivered, unsettled message of a session: its group, partition and index."""

    app: str
    partition: int
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
    _stopped: bool = False
    _watched: set[Connection] = field(default_factory=set)
    _blocked: dict[tuple[str, str], float] = field(default_factory=dict)
    """Consumer → monotonic time before which it is not taken for (rate limit, refusal)."""
    _caught_up: CaughtUp[tuple[str, str]] = field(init=False)
    """Consumers whose last lease left nothing servable: a new consume does not make the
    pump lease for them again (each long poll of a caught-up consumer cost an empty
    lease); see :mod:`brokers.servers.caught_up`."""
    _ahead: dict[tuple[str, str], deque[tuple[Delivery, float]]] = field(default_factory=dict)
    """Consumer → deliveries leased and not yet dealt, with the monotonic time leased."""
    _ahead_timer: asyncio.TimerHandle | None = None
    _paces: Paces[tuple[str, str]] = field(default_factory=Paces)
    """What each consumer took since its last lease."""
    _to_settle: list[InFlight] = field(default_factory=list)
    _settle_timer: asyncio.TimerHandle | None = None
    _settle_since: float = 0.0
    """When the oldest ack in ``_to_settle`` came (monotonic)."""
    _streams_timer: asyncio.TimerHandle | None = None
    _streams_wait: float = 0.0
    _streams: set[Connection] = field(default_factory=set)
    """Connections that may hold streaming deliveries in flight (settled once their
    transport drained): only these are looked at after a dispatch round, not every
    connection with something in flight (a thousand long pollers of one MQ)."""
    retired: bool = False
    """Dropped from the server's MQs (:meth:`_forget_if_idle`): not to be consumed again."""

    def __post_init__(self) -> None:
        self._caught_up = CaughtUp()

    def catalog_changed(self) -> None:
        """The catalog changed: caught-up consumers look again if the change concerns
        them (a consumer resumed, a policy granted on this MQ)."""
        if self._read_catalog():
            self._event.set()

    def _read_catalog(self) -> bool:
        """:meth:`CaughtUp.catalog` of this MQ's consumers (their apps)."""
        apps = (s.app for s in self.sessions.values())
        return self._caught_up.catalog(self.ctx.engine, self.name, apps)

    @property
    def owner(self) -> str:
        """Who holds this server's leases of the MQ (sessions' messages are released one
        by one; on a crash the leases expire)."""
        return f"zbus:{self.ctx.broker_id}:{id(self.ctx):x}"

    # ------------------------------------------------------------------ consume

    async def consume(
        self, conn: Connection, msgid: str | None, window: int, aliases: AliasFamily, app: str
    ) -> None:
        """Replace ``conn``'s pull session (§9.1) and settle what it had in flight."""
        now = conn.now()
        self._replace(conn, now)
        await self._settle(conn, now)
        if not conn.closed:
            self._park(conn, msgid, window, aliases, app, now)

    def consume_now(
        self,
        conn: Connection,
        msgid: str | None,
        window: int,
        aliases: AliasFamily,
        app: str,
        *,
        allowed: bool | None = None,
    ) -> bool:
        """:meth:`consume` without waiting for anything — the common case, where what the
        connection had in flight is only acked (a long poll, a streaming consumer's
        next consume); False, with nothing done, when some of it must be released first
        (§13.1's racing deliveries): then :meth:`consume` it is. ``allowed``: the
        engine's gate was just asked (True: the consumer may take messages now)."""
        now = conn.now()
        settle, again = self._sort_inflight(conn, now)
        if again:
            return False
        self._replace(conn, now)
        if settle:
            del self.inflight[conn]
            self._settle_soon(settle)
        if conn.closed:
            return True
        if window != 1 or not self._poll_from_memory(conn, msgid, aliases, app, now, allowed):
            self._park(conn, msgid, window, aliases, app, now, allowed)
        return True

    def _poll_from_memory(
        self,
        conn: Connection,
        msgid: str | None,
        aliases: AliasFamily,
        app: str,
        now: float,
        allowed: bool | None,
    ) -> bool:
        """A long poll (window 1) answered from its consumer's read-ahead while no session
        of the MQ waits: what :meth:`_park` and :meth:`_serve_from_memory` do for it — the
        session recorded, its delivery written and in flight — without putting it in the
        line and dealing to it from there (a long poller sends one consume per message).
        False, with nothing done, when it must park."""
        if self.line or conn.writing_paused:
            return False
        key = (app, conn.remote_host)
        if key not in self._ahead or not self._ready(key):
            return False
        ahead = self._take_ahead(key, 1, allowed)
        if ahead is None:
            return False
        d = ahead[0][0]
        out = self._delivery(d, msgid, aliases, app)
        if out is None:  # failed to the engine: the poll waits for the next message
            return False
        self._watch(conn)
        self.ctx.consumed(self.name, conn, now)
        self.sessions[conn] = PullSession(
            conn, msgid, 0, aliases, app, now, key[1], delivered=1, active=False
        )
        self._paces.took(key, 1)
        item = InFlight(app, d.partition, d.index, now, now, False)
        if not conn.send_encoded(out):
            self.ctx.spawn(self._release([item]), f"zbus-release-{self.name}")
            return True
        self.inflight.setdefault(conn, []).append(item)
        self._settle_streams()
        return True

    def _replace(self, conn: Connection, now: float) -> None:
        """End ``conn``'s previous session, learning its timeout (§13.1) from it."""
        previous = self.sessions.pop(conn, None)
        if previous is not None:
            if previous.active and previous.delivered == 0 and previous.window > 0:
                waited = now - previous.parked_at
                if waited >= MIN_LEARN:
                    conn.learned_timeout = waited
            self._deactivate(previous, in_line=previous.active)

    def _park(
        self,
        conn: Connection,
        msgid: str | None,
        window: int,
        aliases: AliasFamily,
        app: str,
        now: float,
        allowed: bool | None = None,
    ) -> None:
        self._watch(conn)
        self.ctx.consumed(self.name, conn, now)
        session = PullSession(conn, msgid, window, aliases, app, now, conn.remote_host)
        self.sessions[conn] = session
        if window == 0:
            return
        self.line.append(session)
        if window > 0 and conn.learned_timeout is not None:
            delay = conn.learned_timeout * self.ctx.config.retire_fraction
            session.timer = asyncio.get_running_loop().call_later(delay, self._retire, session)
        if not self._serve_from_memory(session, allowed):
            self._kick()

    def _serve_from_memory(self, session: PullSession, allowed: bool | None = None) -> bool:
        """Deal what was read ahead for ``session``'s consumer at once, as the pump would
        (the common long poll: its next message is in memory); True when nothing is left
        for the pump to do (no session of the MQ waits any more). ``allowed``: the gate's
        answer for the consumer, when it was just asked."""
        key = (session.app, session.address)
        if key not in self._ahead or not self._ready(key) or session.conn.writing_paused:
            return False
        want = self.ctx.config.take_batch if session.window < 0 else session.window
        unsent = self._deal_ahead(key, want, allowed)
        if unsent is None:
            return False
        if unsent:
            self.ctx.spawn(self._release(unsent), f"zbus-release-{self.name}")
        return not self.line

    def parked(self) -> int:
        """Sessions waiting for messages."""
        return sum(1 for s in self.line if s.active)

    def _retire(self, session: PullSession) -> None:
        session.timer = None
        self._deactivate(session)

    def _deactivate(self, session: PullSession, *, in_line: bool = True) -> None:
        """End ``session``; ``in_line`` False when it is known not to wait in the line (an
        ended session never does): a failed ``deque.remove`` formats the session's repr."""
        session.active = False
        if session.timer is not None:
            session.timer.cancel()
            session.timer = None
        if in_line:
            with contextlib.suppress(ValueError):
                self.line.remove(session)

    def _watch(self, conn: Connection) -> None:
        if conn not in self._watched:
            self._watched.add(conn)
            conn.on_close(lambda: self._closed(conn))

    def _closed(self, conn: Connection) -> None:
        self._watched.discard(conn)
        self._streams.discard(conn)
        session = self.sessions.pop(conn, None)
        if session is not None:
            self._deactivate(session, in_line=session.active)
        items = self.inflight.pop(conn, [])
        if items:
            self.ctx.spawn(self._release(items), f"zbus-release-{self.name}")
        if not self._watched and self._task is not None and not self._task.done():
            self._event.set()  # a pump parked for sessions that all went: it ends
        self._forget_if_idle()

    def _forget_if_idle(self, *, pump_ended: bool = False) -> None:
        """Leave the server's MQs when nothing of this runtime is left: no connection that
        consumed it open (only an open one keeps it in its consume cache, which checks
        :attr:`retired` too: :func:`.consume.consume_now`), nothing in flight, read ahead
        or to be settled, its pump ended (``pump_ended``: the pump is ending now). What it
        handed to background tasks (releases, settles) finishes without it."""
        if (
            self._watched
            or self.sessions
            or self.line
            or self.inflight
            or self._ahead
            or self._to_settle
            or self._streams
            or self._stopped
            or (not pump_ended and self._task is not None and not self._task.done())
        ):
            return
        self.retired = True
        if self.ctx.queues.get(self.name) is self:
            del self.ctx.queues[self.name]

    # ------------------------------------------------------------------ settling

    async def _settle(self, conn: Connection, now: float) -> None:
        settle, again = self._sort_inflight(conn, now)
        self.inflight.pop(conn, None)
        if settle:  # the next delivery does not wait for the ack's round trip (a failed
            # ack leaves the messages leased: they come back when the lease expires)
            self._settle_soon(settle)
        if again:
            await self._release(again)

    def _sort_inflight(self, conn: Connection, now: float) -> tuple[list[InFlight], list[InFlight]]:
        """What ``conn`` has in flight, split into what its new consume settles and what
        it releases (delivered again, see the module docstring)."""
        items = self.inflight.get(conn)
        if not items:
            return [], []
        cfg = self.ctx.config
        guess, frac = cfg.client_timeout_guess, cfg.retire_fraction
        if conn.learned_timeout is not None:
            return items, []
        settle, again = [], []
        for item in items:
            late = item.delivered_at - item.parked_at >= frac * guess
            racing = now - item.delivered_at < (1 - frac) * guess
            if not item.streaming and late and racing:
                again.append(item)
            else:
                settle.append(item)
        return settle, again

    def _settle_soon(self, items: list[InFlight]) -> None:
        """Ack ``items`` with everything else settled meanwhile (one engine call per group
        and partition for all of them: a long poller settles one message per consume):
        at once when ``settle_batch`` wait, once the oldest waited ``settle_delay`` when
        ``settle_gather`` wait, else once it waited ``settle_max_delay``."""
        cfg = self.ctx.config
        self._to_settle.extend(items)
        waiting = len(self._to_settle)
        if waiting >= cfg.settle_batch:
            self._flush_settles()
        elif self._settle_timer is None:
            self._settle_since = time.monotonic()
            self._settle_timer = asyncio.get_running_loop().call_later(
                cfg.settle_delay, self._settle_due
            )
        elif (
            waiting >= cfg.settle_gather
            and time.monotonic() - self._settle_since >= cfg.settle_delay
        ):
            self._flush_settles()  # the oldest waited for company long enough

    def _settle_due(self) -> None:
        """The oldest ack waited ``settle_delay``: go if ``settle_gather`` wait, else wait
        for more until ``settle_max_delay`` (a MQ polled a few times a second sent a call
        per ack or two)."""
        self._settle_timer = None
        cfg = self.ctx.config
        left = self._settle_since + cfg.settle_max_delay - time.monotonic()
        if len(self._to_settle) >= cfg.settle_gather or left <= 0.001:
            self._flush_settles()
        else:
            self._settle_timer = asyncio.get_running_loop().call_later(left, self._settle_due)

    def _flush_settles(self) -> None:
        if self._settle_timer is not None:
            self._settle_timer.cancel()
            self._settle_timer = None
        items, self._to_settle = self._to_settle, []
        if items:
            self.ctx.spawn(self._settle_items(items), f"zbus-settle-{self.name}")
            self._forget_if_idle()  # the last consumer's acks went: nothing may be left

    async def _settle_items(self, items: list[InFlight]) -> None:
        """Ack ``items``: one engine call per (app, partition)."""
        for (app, partition), indexes in _by_group(items).items():
            await self.ctx.engine.settle(self.name, app, partition, indexes)

    async def _release(self, items: list[InFlight]) -> None:
        """Back to the group, delivered again (marked redelivered by the engine)."""
        for (app, partition), indexes in _by_group(items).items():
            await self.ctx.engine.release(self.name, app, partition, indexes)

    def _settle_streams(self, delay: float | None = None) -> None:
        """Look at the streaming sessions' transports ``drain_check_delay`` (or ``delay``) from
        now: what a dispatch round wrote leaves at the end of its loop turn, so a look at
        once found it still waiting, every round (the deliveries stayed in flight until
        their lease ended, then came again)."""
        if self._streams and self._streams_timer is None:
            self._streams_timer = asyncio.get_running_loop().call_later(
                self.ctx.config.drain_check_delay if delay is None else delay,
                self._check_streams,
            )

    def _check_streams(self) -> None:
        """Settle the streaming deliveries of every connection whose transport drained
        (what it was dealt was handed to the kernel); look again at one whose peer does not
        read once it did, at one still writing later — twice as late each time nothing
        drained, up to ``STREAMS_RECHECK_MAX`` (a peer that stopped reading below the
        transport's high-water mark must not cost a look every few milliseconds)."""
        self._streams_timer = None
        done: list[InFlight] = []
        again = False
        for conn in list(self._streams):
            items = self.inflight.get(conn)
            if not items:
                self._streams.discard(conn)
                continue
            if conn.buffered() != 0:
                if conn.writing_paused:
                    conn.when_writable((self, "streams"), self._settle_streams)
                else:
                    again = True
                continue
            self._streams.discard(conn)
            keep = [i for i in items if not i.streaming]
            done.extend(i for i in items if i.streaming)
            if keep:
                self.inflight[conn] = keep
            else:
                del self.inflight[conn]
        if done:
            self._settle_soon(done)
            self._streams_wait = self.ctx.config.drain_check_delay
        elif again:
            longer = max(2 * self._streams_wait, self.ctx.config.drain_check_delay)
            self._streams_wait = min(longer, STREAMS_RECHECK_MAX)
        if again:
            self._settle_streams(self._streams_wait)

    # ------------------------------------------------------------------ pump

    def _kick(self) -> None:
        self._event.set()
        if (self._task is None or self._task.done()) and not self._stopped:
            self._task = self.ctx.spawn(self._guarded_pump(), f"zbus-queue-{self.name}")

    async def _guarded_pump(self) -> None:
        """The pump; one that stops on an unexpected error starts again after
        ``PUMP_RESTART_S`` while sessions wait (they would otherwise wait for their next
        consume), not at once (a fault that recurs must not spin the process)."""
        try:
            await self._pump()
            self._forget_if_idle(pump_ended=True)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception(
                "zbus queue %s: pump stopped; restarting in %.0f s", self.name, PUMP_RESTART_S
            )
            asyncio.get_running_loop().call_later(PUMP_RESTART_S, self._restart)

    def _restart(self) -> None:
        if self.line:
            self._kick()

    async def stop(self) -> None:
        """Stop the pump (server shutdown); what was read ahead goes back unread."""
        self._stopped = True
        if self._task is not None:
            await cancel_and_wait(self._task)
        self._check_streams()  # what streamed and drained is settled, not released
        if self._streams_timer is not None:
            self._streams_timer.cancel()
            self._streams_timer = None
        self._flush_settles()  # what consumes acked goes to the engine now
        if self._ahead_timer is not None:
            self._ahead_timer.cancel()
            self._ahead_timer = None
        ahead = [(key, d) for key, q in self._ahead.items() for d, _ in q]
        self._ahead.clear()
        self.ctx.read_ahead.release(d for _, d in ahead)
        with contextlib.suppress(EngineError):
            await self._return_unread(ahead)

    async def _pump(self) -> None:
        engine, cfg = self.ctx.engine, self.ctx.config
        async with engine.notifier.watch(self.name) as event:
            self._event = event
            self._read_catalog()
            # what was appended while no pump watched was announced to nobody: a consumer
            # caught up before then looks again (else its messages waited for the recheck)
            self._caught_up.clear()
            while True:
                event.unpark()
                if event.take() != set():  # notified (not only kicked): every consumer looks
                    self._caught_up.clear()
                if not self.line:
                    # long polls come back within a round trip: wait for the next session
                    # a while rather than end the pump and watch the topic again (with
                    # nobody to take what this process appends: nothing to claim)
                    if event.streaming:
                        event.stream(())
                    if event.left_behind(self._caught_up.settled(engine.now_ms())):
                        await engine.notifier.announce(self.name)
                    loop = asyncio.get_running_loop()
                    deadline = loop.time() + PUMP_IDLE
                    while not self.line and (left := deadline - loop.time()) > 0:
                        event.clear()
                        with contextlib.suppress(TimeoutError):
                            async with asyncio.timeout(left):  # no task per wait
                                await event.wait()
                    if not self.line:
                        return
                    continue
                wants: dict[tuple[str, str], int] = {}
                streams: set[str] = set()
                for s in self.line:
                    if s.conn.writing_paused:  # dealt to again once its peer read
                        s.conn.when_writable(self, self._kick)
                        continue
                    key = (s.app, s.address)
                    if s.window < 0 and key not in self._blocked:
                        streams.add(s.app)
                    if wants.get(key, 0) < cfg.take_batch and self._ready(key):
                        want = wants.get(key, 0) + (cfg.take_batch if s.window < 0 else s.window)
                        wants[key] = min(want, cfg.take_batch)
                if streams != event.streaming:
                    event.stream(streams)  # appends here may claim them (Notifier.claim)
                progressed = False
                now_ms = engine.now_ms()
                for (app, address), want in wants.items():
                    unsent = self._deal_ahead((app, address), want)
                    if unsent is not None:
                        if unsent:
                            await self._release(unsent)
                        progressed = True
                        continue
                    if self._caught_up.holds((app, address), now_ms):
                        continue
                    try:
                        count = self._lease_size((app, address), want)
                        leased_at = time.monotonic()
                        lease = await engine.lease(
                            self.name,
                            app,
                            count=count,
                            owner=self.owner,
                            address=address,
                            lease_ms=cfg.lease_ms,
                        )
                        got = lease.deliveries
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
                    # a lease takes one partition's batch, and of messages due again one
                    # run at a time: the engine says whether more is there (else the next
                    # lease for this consumer would find nothing)
                    self._caught_up.record((app, address), lease)
                    if not got:
                        continue
                    self._paces.leased((app, address), leased_at)  # its pace counts from here
                    await self._dispatch(got, (app, address), leased_at)
                    progressed = True
                if progressed:
                    continue
                wait = math.inf  # nothing due: until a notification or kick
                if self._blocked:
                    wait = min(self._blocked.values()) - time.monotonic()
                # what its consumers would take at once: this process's appends may claim
                # it (Notifier.claim), so other processes need not look
                capacity: dict[str, int] = {}
                for (app, address), want in wants.items():
                    if (app, address) not in self._blocked:
                        capacity[app] = capacity.get(app, 0) + want
                settled = self._caught_up.settled(engine.now_ms())
                if event.park(capacity, serves={s.app for s in self.line}, settled=settled):
                    await engine.notifier.announce(self.name)  # claims it cannot take
                try:
                    async with asyncio.timeout(self._caught_up.wait_s(engine.now_ms(), wait)):
                        await event.wait()
                except TimeoutError:  # see brokers.servers.caught_up
                    self._caught_up.recheck()

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
        line = self.line
        if line:  # most often the first in line (one consumer streaming): no list
            session = line[0]
            if (
                session.active
                and not session.conn.closed
                and not session.conn.writing_paused
                and session.app == key[0]
                and session.address == key[1]
            ):
                return line.popleft()
        skipped: list[PullSession] = []
        found = None
        while self.line:
            session = self.line.popleft()
            if not session.active or session.conn.closed:
                continue
            if (session.app, session.address) != key or session.conn.writing_paused:
                skipped.append(session)
                continue
            found = session
            break
        self.line.extendleft(reversed(skipped))
        return found

    async def _dispatch(
        self, deliveries: list[Delivery], consumer: tuple[str, str], leased_at: float
    ) -> None:
        unsent = self._hand_out(deliveries, consumer, leased_at)
        if unsent:
            await self._release(unsent)

    def _deal_ahead(
        self, key: tuple[str, str], want: int, allowed: bool | None = None
    ) -> list[InFlight] | None:
        """Deal up to ``want`` of what was read ahead for ``key`` (:meth:`_take_ahead`);
        None when there was none, else what a closing connection refused, to release."""
        ahead = self._take_ahead(key, want, allowed)
        return None if ahead is None else self._hand_out(ahead[0], key, ahead[1])

    def _hand_out(
        self, deliveries: list[Delivery], consumer: tuple[str, str], leased_at: float
    ) -> list[InFlight]:
        """Deal ``deliveries`` to ``consumer``'s sessions, keep what none took as
        read-ahead; what a closing connection refused, to release."""
        unsent: list[InFlight] = []
        undealt: list[Delivery] = []
        now = Connection.now()
        corked: set[Connection] = set()
        try:
            self._deal(deliveries, consumer, now, unsent, undealt, corked)
        finally:
            # written now, not after the loop's next poll; inside a read, with its answers
            joined = turnwrite.holding()
            held = None if joined else turnwrite.hold()
            try:
                for conn in corked:  # each connection's share of the batch in one write
                    conn.uncork()
            finally:
                if not joined:
                    turnwrite.release(held)
        self._paces.took(consumer, len(deliveries) - len(undealt))
        if undealt:  # for the consumer's next sessions (see the module docstring)
            self._keep_ahead(consumer, undealt, leased_at)
        self._settle_streams()
        return unsent

    # ------------------------------------------------------------------ read-ahead

    def _lease_size(self, key: tuple[str, str], want: int) -> int:
        """How many to lease for ``key``, whose sessions want ``want``: what it took per
        ``read_ahead_hold`` since its previous lease (read-ahead it will use before it goes
        back), at least ``want``, at most a batch; only ``want`` while the process's budget
        is spent or the consumer's pace is not known yet."""
        cfg = self.ctx.config
        per_hold = self._paces.per(key, cfg.read_ahead_hold, time.monotonic())
        if per_hold is None or not self.ctx.read_ahead.open:
            return want
        return max(want, min(cfg.take_batch, per_hold))

    def _take_ahead(
        self, key: tuple[str, str], want: int, allowed: bool | None = None
    ) -> tuple[list[Delivery], float] | None:
        """Up to ``want`` of what was read ahead for ``key`` and may still be dealt, with
        when it was leased (the oldest); None when there is none. The rest stays where it
        is (a long poll takes one message, not the whole read-ahead and back). Asks the
        gate again (unless its answer ``allowed`` comes with the call): a paused or
        refused consumer's deliveries go back unread."""
        queue = self._ahead.get(key)
        if not queue:
            return None
        if allowed is None:
            try:
                allowed = self.ctx.engine.authorize_consumer(self.name, key[0], key[1])
            except EngineError:
                allowed = False
        if not allowed:
            self._drop_ahead(key, everything=True)
            self._block(key, 1.0)
            return None
        self._drop_ahead(key)
        if not queue:
            return None
        leased_at = queue[0][1]
        take = queue.popleft
        deliveries = [take()[0] for _ in range(min(want, len(queue)))]
        if not queue:
            del self._ahead[key]  # no empty queue stays: the hold timer reads each one's head
        self.ctx.read_ahead.release(deliveries)
        return deliveries, leased_at

    def _keep_ahead(self, key: tuple[str, str], deliveries: list[Delivery], at: float) -> None:
        fit = self.ctx.read_ahead.keep(deliveries)
        if fit < len(deliveries):  # the process's budget is spent: back to the group now
            spilled = [(key, d) for d in deliveries[fit:]]
            self.ctx.spawn(self._return_unread(spilled), f"zbus-unread-{self.name}")
            deliveries = deliveries[:fit]
            if not deliveries:
                return
        queue = self._ahead.setdefault(key, deque())
        queue.extendleft((d, at) for d in reversed(deliveries))  # before anything newer
        if self._ahead_timer is None:
            delay = max(0.0, at + self.ctx.config.read_ahead_hold - time.monotonic())
            self._ahead_timer = asyncio.get_running_loop().call_later(delay, self._expire_ahead)

    def _drop_ahead(self, key: tuple[str, str], *, everything: bool = False) -> None:
        """Send ``key``'s read-ahead deliveries past their hold (or all) back unread."""
        queue = self._ahead.get(key)
        if not queue:
            self._ahead.pop(key, None)
            return
        limit = time.monotonic() - self.ctx.config.read_ahead_hold
        stale: list[tuple[tuple[str, str], Delivery]] = []
        while queue and (everything or queue[0][1] <= limit):
            stale.append((key, queue.popleft()[0]))
        if not queue:
            del self._ahead[key]
        if stale:
            self.ctx.read_ahead.release(d for _, d in stale)
            self.ctx.spawn(self._return_unread(stale), f"zbus-unread-{self.name}")

    def _expire_ahead(self) -> None:
        self._ahead_timer = None
        for key in list(self._ahead):
            self._drop_ahead(key)
        if self._ahead:
            oldest = min(q[0][1] for q in self._ahead.values())
            delay = max(0.01, oldest + self.ctx.config.read_ahead_hold - time.monotonic())
            self._ahead_timer = asyncio.get_running_loop().call_later(delay, self._expire_ahead)
        else:
            self._forget_if_idle()

    async def _return_unread(self, items: list[tuple[tuple[str, str], Delivery]]) -> None:
        """Back to the group: marked redelivered only when they had been delivered before."""
        by_app: dict[str, list[Delivery]] = {}
        for (app, _), d in items:
            by_app.setdefault(app, []).append(d)
        for app, deliveries in by_app.items():
            await self.ctx.engine.return_unread(self.name, app, deliveries)

    def _deal(
        self,
        deliveries: list[Delivery],
        consumer: tuple[str, str],
        now: float,
        unsent: list[InFlight],
        undealt: list[Delivery],
        corked: set[Connection],
    ) -> None:
        """Hand ``deliveries`` round-robin to the consumer's sessions (writes held); what
        no session took is ``undealt``, what a closing connection refused ``unsent``."""
        app = consumer[0]
        for i, d in enumerate(deliveries):
            session = self._next_session(consumer)
            if session is None:
                undealt.extend(deliveries[i:])
                return
            if session.window < 0 and not self.line:
                # the one session waiting streams: the rest of the batch is all its own
                # (round-robin among one), dealt without asking the line each time
                self._stream_run(session, deliveries, i, now, unsent, undealt, corked)
                return
            out = self._delivery(d, session.msgid, session.aliases, app)
            if out is None:  # failed to the engine: the session waits for the next one
                self.line.appendleft(session)
                continue
            if session.conn not in corked:
                session.conn.cork()
                corked.add(session.conn)
            if not session.conn.send_encoded(out):
                self._deactivate(session, in_line=False)
                unsent.append(InFlight(app, d.partition, d.index, now, now, False))
                continue
            session.delivered += 1
            streaming = session.window < 0
            self.inflight.setdefault(session.conn, []).append(
                InFlight(app, d.partition, d.index, now, session.parked_at, streaming)
            )
            if streaming:
                self._streams.add(session.conn)
            else:
                session.window -= 1
            if session.window != 0:
                self.line.append(session)
            else:
                self._deactivate(session, in_line=False)

    def _delivery(
        self, d: Delivery, msgid: str | None, aliases: AliasFamily, app: str
    ) -> bytes | None:
        """The wire bytes of ``d`` for a session of ``app``; None when it cannot be
        encoded (headers are filtered to writable ones, so that is a bug, not input): then
        it is logged and failed to the engine — retried after its backoff, dead-lettered
        past the retry limit — not released, which would make it due again at once and
        handed back here, again and again."""
        try:
            return delivery_bytes(d.record, msgid=msgid, redelivered=d.redelivered, aliases=aliases)
        except EncodeError:
            log.exception("zbus queue %s: cannot encode message %d", self.name, d.index)
            self.ctx.spawn(self._fail(app, d), f"zbus-fail-{self.name}")
            return None

    async def _fail(self, app: str, d: Delivery) -> None:
        try:
            await self.ctx.engine.fail(self.name, app, d.partition, [d.index])
        except EngineError as exc:  # the lease lapses instead: the same outcome, later
            log.info(
                "zbus queue %s: failure of message %d not applied: %s", self.name, d.index, exc
            )

    def _stream_run(
        self,
        session: PullSession,
        deliveries: list[Delivery],
        start: int,
        now: float,
        unsent: list[InFlight],
        undealt: list[Delivery],
        corked: set[Connection],
    ) -> None:
        """:meth:`_deal` of ``deliveries[start:]`` to ``session``, a streaming session
        the only one waiting: each is written to it until its connection refuses one
        (that one ``unsent``, the rest ``undealt``, the session ended); the session then
        waits in line again."""
        conn, msgid, aliases, app = session.conn, session.msgid, session.aliases, session.app
        if conn not in corked:
            conn.cork()
            corked.add(conn)
        items: list[InFlight] = []
        for i in range(start, len(deliveries)):
            d = deliveries[i]
            out = self._delivery(d, msgid, aliases, app)
            if out is None:  # failed to the engine
                continue
            if not conn.send_encoded(out):
                self._deactivate(session, in_line=False)
                unsent.append(InFlight(app, d.partition, d.index, now, now, False))
                undealt.extend(deliveries[i + 1 :])
                break
            items.append(InFlight(app, d.partition, d.index, now, session.parked_at, True))
        else:
            self.line.append(session)
        if items:
            session.delivered += len(items)
            self.inflight.setdefault(conn, []).extend(items)
            self._streams.add(conn)


def _by_group(items: list[InFlight]) -> dict[tuple[str, int], list[int]]:
    out: dict[tuple[str, int], list[int]] = {}
    for item in items:
        out.setdefault((item.app, item.partition), []).append(item.index)
    return out


def queue_for(ctx: ServerContext, name: str) -> QueueMq:
    """The runtime of queue MQ ``name`` on this server (created on first use, and again
    after an idle one left)."""
    mq = ctx.queues.get(name)
    if mq is None:
        mq = ctx.queues[name] = QueueMq(ctx, name)
    return mq
