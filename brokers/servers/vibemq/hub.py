"""Dispatch: queues → this process's subscribers (vibemq.md §7, §9), on consumer groups.

A queue is a catalog topic like any other, so its subscribers get what every protocol's
producers stored. One :class:`QueueDispatcher` per queue with local subscribers leases from
the engine whenever some subscriber has room, and sleeps on the engine's notification for
the queue or a kick (an ack, a lapsed lease or a drained transport gave a subscriber room;
a catalog change that concerns its consumers; the hub's timer checks ack deadlines every
``timer_interval``).
A consumer whose last lease left its group with nothing servable (it found nothing, or
the engine said nothing more is there) leases again on the queue's next notification —
an append, a release that made messages due, an offset reset — when the time its lease
said something may be due comes (a retry after its backoff, another lessee's expiry), on a
catalog change that concerns it, or at the safety net's recheck
(:mod:`brokers.servers.caught_up`); not on every ack, nor on a timer: a dispatcher wakes
only when something is due, so a fleet of idle subscribed queues costs next to nothing.
A dispatcher stopped by an unexpected error starts again after ``RESTART_S``.
Every lease passes the engine's gate: policy, blacklist, pause, rate limit.

* RoundRobin and PriorityBased: subscribers compete as their acting app's consumer group.
  The dispatcher leases per consumer — the (app, address) pairs of its subscribers — as
  much as they have room for, and deals the batch to that consumer's subscribers in turn.
  A RoundRobin consumer also keeps deliveries leased beyond that room — what its
  subscribers took per ``READ_AHEAD_HOLD_S`` since its last lease, up to ``READ_AHEAD`` — so
  the slot an ack frees is filled from memory while the next lease is on its way (with 100
  unacked per subscriber, a Redis round trip per refill left the broker idle a third of the
  time), as long as the process's read-ahead budget (:mod:`brokers.servers.readahead`) has
  room: what does not fit goes back at once. What is read ahead keeps its lease's
  deadline; it goes back to the group
  unread (no delivery attempt) after ``READ_AHEAD_HOLD_S``, when the consumer's last
  subscriber here leaves, and when the gate — asked again before memory is dealt — refuses
  or pauses the consumer. PriorityBased queues read nothing ahead: a message published
  with a higher priority must not wait behind ones already taken.
* FanOutWithAck: each subscriber is a *member* of its app's group with its own progress
  (``<app>#<clientId>`` for a durable subscriber, else its connection's own) that starts
  where it joined; its acks settle it, and a durable member's unacked messages wait for its
  next connection to any broker. Retries, TTL and the dead-letter queue are the engine's.
* FanOutWithoutAck: likewise a member each, settling at once what it was written.
  A member is marked caught up as a consumer is (any member's ack wakes the dispatcher:
  every member leased again on it, most of them finding nothing).

Dispatchers of several processes compete for the same group through the engine.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections import deque
from collections.abc import Sequence
from typing import Protocol

from brokers.engine import (
    AccessDenied,
    Delivery,
    EngineError,
    Lease,
    RateLimited,
    Wakeup,
    cancel_and_wait,
)
from brokers.servers.caught_up import CaughtUp
from brokers.servers.readahead import Paces
from brokers.servers.vibemq.context import ServerContext

log = logging.getLogger("mqcloud.vibemq")
FANOUT_MODES = ("FanOutWithAck", "FanOutWithoutAck")
TAKE_BATCH = 128
READ_AHEAD = 128
"""Deliveries a RoundRobin consumer keeps leased ahead of its subscribers' room, so an ack's
freed slot is filled from memory, not after a Redis round trip."""
READ_AHEAD_MIN = 32
"""A consumer with no room left (after taking from its read-ahead) tops it up only when
this many are missing."""
READ_AHEAD_HOLD_S = 1.0
"""How long a read-ahead delivery waits for room before it goes back to the group unread."""
REGISTRY_REFRESH_S = 5.0
RESTART_S = 1.0
"""A dispatcher that stopped on an unexpected error starts again after this many seconds."""
SWEEP_CHUNK = 256  # TTL queues whose sweep calls go out together


Leased = tuple[Delivery, int, float]
"""A leased delivery, when its ack is due (engine ms: its lease's deadline, less the
config's ``retry_margin_ms`` for a competing consumer's) and the loop time it was leased
at."""


def competing_owner(node: str, queue: str) -> str:
    """Who holds the competing leases of ``queue`` taken in process ``node``."""
    return f"vibemq:{node}:{queue}"


def by_partition(deliveries: Sequence[Delivery]) -> dict[int, list[int]]:
    """The indexes of ``deliveries`` by partition (one engine call each)."""
    out: dict[int, list[int]] = {}
    for d in deliveries:
        out.setdefault(d.partition, []).append(d.index)
    return out


class Subscriber(Protocol):
    """What the hub needs of a session."""

    key: str
    peer: str
    closed: bool

    @property
    def durable(self) -> bool: ...
    def acting_app(self, queue: str) -> str: ...
    def member_id(self, queue: str) -> str: ...
    def capacity(self, queue: str) -> int: ...
    def deliver_leases(
        self, queue: str, app: str, member: str | None, leased: Sequence[Leased]
    ) -> int: ...
    def deliver_copy(self, queue: str, delivery: Delivery) -> bool: ...
    def drop_subscription(self, queue: str) -> None: ...
    async def leave_group(self, queue: str) -> None: ...
    async def tick(self, now_ms: int) -> None: ...


class QueueDispatcher:
    """Feeds one queue's local subscribers."""

    def __init__(self, hub: Hub, queue: str) -> None:
        self.hub, self.queue = hub, queue
        self.subscribers: list[Subscriber] = []
        self._event: asyncio.Event | None = None
        """The queue's notification while the dispatcher runs; :meth:`kick` sets it."""
        self.crashed = False
        """Its last run ended on an unexpected error (it starts again after ``RESTART_S``)."""
        self._fanout = True
        """The queue's last round fed FanOut members (not one shared group per app)."""
        self._next = 0
        self.task: asyncio.Task[None] | None = None
        self._ahead: dict[tuple[str, str], deque[Leased]] = {}
        """Consumer → deliveries read ahead, oldest first."""
        self._paces: Paces[tuple[str, str]] = Paces()
        """What each consumer's subscribers took since its last lease."""
        self._blocked: dict[tuple[str, str], float] = {}
        """Consumer (app, address) → loop time before which it is not leased for again
        (over its rate limit, or refused by the gate)."""
        self._caught_up: CaughtUp[tuple[str, ...]] = CaughtUp()
        """Consumers (app, address) and FanOut members (app, address, member id) whose last
        lease left nothing servable: an ack that frees room does not make them lease again
        (a caught-up subscriber acking one by one leased once per ack, each lease empty)."""

    @property
    def owner(self) -> str:
        """Who holds the competing leases this dispatcher takes (a subscriber's messages
        are released one by one when it goes; a crashed process's leases expire)."""
        return competing_owner(self.hub.ctx.node, self.queue)

    def consumers(self) -> dict[tuple[str, str], list[Subscriber]]:
        """The local subscribers by the consumer they take as: (app, address)."""
        groups: dict[tuple[str, str], list[Subscriber]] = {}
        for sub in self.subscribers:
            groups.setdefault((sub.acting_app(self.queue), sub.peer), []).append(sub)
        return groups

    def left(self, sub: Subscriber) -> None:
        """``sub`` unsubscribed: its FanOut member's caught-up mark goes with it (a member
        id per connection: the marks of members that left piled up until the queue's next
        notification, and every round reads them all)."""
        app = sub.acting_app(self.queue)
        self._caught_up.forget((app, sub.peer, sub.member_id(self.queue)))

    def _ready(self, key: tuple[str, str]) -> bool:
        until = self._blocked.get(key)
        if until is None:
            return True
        if asyncio.get_running_loop().time() >= until:
            del self._blocked[key]
            return True
        return False

    def _block(self, key: tuple[str, str], ms: int) -> None:
        self._blocked[key] = asyncio.get_running_loop().time() + ms / 1000

    def start(self) -> None:
        self.crashed = False
        self.task = asyncio.create_task(self._run(), name=f"vibemq-dispatch-{self.queue}")

    def kick(self) -> None:
        """Run a round soon (a subscriber may take more, or joined)."""
        if self._event is not None:
            self._event.set()

    def catalog_changed(self) -> None:
        """The catalog changed: caught-up consumers look again if the change concerns
        them (a consumer resumed, a policy granted on this queue)."""
        if self._read_catalog():
            self.kick()

    def _read_catalog(self) -> bool:
        """:meth:`CaughtUp.catalog` of this queue's consumers (their apps)."""
        apps = (sub.acting_app(self.queue) for sub in self.subscribers)
        return self._caught_up.catalog(self.hub.ctx.engine, self.queue, apps)

    async def _run(self) -> None:
        ctx = self.hub.ctx
        try:
            async with ctx.engine.notifier.watch(self.queue) as event:
                self._event = event
                self._read_catalog()
                # what was published while it did not watch (restarted after a crash, or
                # as it finished) was announced to nobody: its consumers look again
                self._caught_up.clear()
                while self.subscribers:
                    event.unpark()
                    if event.take() != set():  # appended, or released: every consumer looks
                        self._caught_up.clear()
                    failed = False
                    try:
                        full = await self._round()
                    except EngineError as exc:
                        log.warning("VibeMQ dispatch on %s failed: %s", self.queue, exc)
                        full, failed = False, True
                    if full:
                        continue
                    sleep = self._sleep_s()
                    if failed:  # Redis blinked: try again soon, not at the next notification
                        sleep = min(sleep, ctx.config.timer_interval)
                    elif self._park(event):  # claims it cannot take: others look now
                        await ctx.engine.notifier.announce(self.queue)
                    try:
                        async with asyncio.timeout(sleep):  # no task per wait
                            await event.wait()
                    except TimeoutError:  # see brokers.servers.caught_up
                        self._caught_up.recheck()
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception(
                "VibeMQ dispatcher of %s stopped; restarting in %.0f s", self.queue, RESTART_S
            )
            self.crashed = True
        finally:
            self._event = None
            self.return_ahead()
            self.hub._dispatcher_done(self)

    def _park(self, event: Wakeup) -> bool:
        """Say what the consumers could take at once (this process's appends may claim it:
        :meth:`brokers.engine.notify.Notifier.claim`); FanOut members lease for groups of
        their own, so a dispatcher with members is woken by every notification. Whether
        claims were left behind (:meth:`~brokers.engine.notify.Wakeup.park`)."""
        settled = self._caught_up.settled(self.hub.ctx.engine.now_ms())
        if self._fanout:
            event.serves = None  # (its capacity was cleared as its round began)
            return bool(event.left_behind(settled))
        capacity: dict[str, int] = {}
        for (app, address), subs in self.consumers().items():
            if self._ready((app, address)):
                room = sum(sub.capacity(self.queue) for sub in subs)
                capacity[app] = capacity.get(app, 0) + room
        serves = (sub.acting_app(self.queue) for sub in self.subscribers)
        return bool(event.park(capacity, serves=serves, settled=settled))

    def _sleep_s(self) -> float:
        """How long to wait for a notification or a kick: until what was read ahead is
        due back, a held-back consumer may lease again, or a caught-up one's hint — and
        with none of them, until the caught-up safety net (an idle queue costs nothing)."""
        now = asyncio.get_running_loop().time()
        longest = math.inf
        oldest = min((q[0][2] for q in self._ahead.values() if q), default=None)
        if oldest is not None:
            longest = oldest + READ_AHEAD_HOLD_S - now
        if self._blocked:
            # A consumer that left while held back is never asked again (:meth:`_ready`
            # forgets a lapsed entry): its entry stayed, and once lapsed made every sleep
            # 10 ms for good. A lapsed entry holds nobody back: forgotten here too.
            self._blocked = {k: until for k, until in self._blocked.items() if until > now}
            if self._blocked:
                longest = min(longest, min(self._blocked.values()) - now)
        return self._caught_up.wait_s(self.hub.ctx.engine.now_ms(), longest)

    async def _round(self) -> bool:
        """Lease and hand out one batch per consumer; True if more may be waiting now."""
        settings = self.hub.ctx.queue_settings(self.queue)
        if settings is None:  # deleted: subscribers are dropped silently
            for sub in list(self.subscribers):
                sub.drop_subscription(self.queue)
            self.subscribers.clear()
            return False
        lease_ms = self.hub.ctx.config.ack_timeout_ms
        self._fanout = settings.delivery_mode in FANOUT_MODES
        if self._fanout:
            self.return_ahead()  # read ahead while the queue was RoundRobin
            return await self._members(settings.delivery_mode == "FanOutWithAck", lease_ms)
        return await self._competing(lease_ms, settings.delivery_mode == "RoundRobin")

    async def _lease(
        self, key: tuple[str, str], count: int, owner: str, lease_ms: int, member: str | None
    ) -> Lease | None:
        """A lease through the gate; None when the consumer is held back for a while. A
        consumer or member whose lease left nothing servable (it found nothing, or the
        engine says nothing more is there) is marked drained."""
        app, address = key
        try:
            lease = await self.hub.ctx.engine.lease(
                self.queue,
                app,
                count=count,
                owner=owner,
                address=address,
                lease_ms=lease_ms,
                client_id=member,
                start="latest",
            )
        except RateLimited as exc:
            self._block(key, exc.retry_after_ms)
            return None
        except AccessDenied as exc:  # its policy went away: nothing for it, recheck later
            log.info("VibeMQ %s: %s", self.queue, exc)
            self._block(key, 1000)
            return None
        # a lease takes one partition's batch, and of messages due again one run at a
        # time: the engine says whether more is there (else its next lease is empty)
        self._caught_up.record(key if member is None else (*key, member), lease)
        return lease

    async def _competing(self, lease_ms: int, read_ahead: bool) -> bool:
        more = False
        budget = self.hub.ctx.read_ahead
        consumers = self.consumers()
        self._drop_ahead(consumers if read_ahead else {})
        for key, subs in consumers.items():
            if not self._ready(key):
                continue
            caps = {id(s): s.capacity(self.queue) for s in subs}
            room = sum(caps.values())
            ahead = self._ahead.get(key)
            dealt = False
            if ahead and room > 0:
                if not self._still_allowed(key):
                    continue
                taken = [ahead.popleft() for _ in range(min(room, len(ahead)))]
                room -= len(taken)
                budget.release(d for d, _, _ in taken)
                back = self._round_robin(key[0], subs, taken, caps)
                if back:  # fits: it was just released
                    budget.keep([d for d, _, _ in back])
                    ahead.extendleft(reversed(back))
                self._paces.took(key, len(taken) - len(back))
                dealt = True
            held = len(ahead) if ahead else 0
            more_ahead = self._ahead_size(key) - held if read_ahead and budget.open else 0
            want = min(TAKE_BATCH, room + max(0, more_ahead))
            # with no room left, top the read-ahead up only for a consumer that is taking
            # it: a stalled one would lease again what its last read-ahead handed back
            if want <= 0 or (room <= 0 and (want < READ_AHEAD_MIN or not dealt)):
                continue
            if self._caught_up.holds(key, self.hub.ctx.engine.now_ms()):
                continue
            deadline = self.hub.ctx.engine.now_ms() + lease_ms
            asked = asyncio.get_running_loop().time()
            margin = self.hub.ctx.config.retry_margin_ms  # for a retry to the same connection
            lease = await self._lease(key, want, self.owner, lease_ms + margin, None)
            got = lease.deliveries if lease is not None else None
            if got:  # its pace counts from here (not from a lease that found none)
                self._paces.leased(key, asked)
                now = asyncio.get_running_loop().time()
                leased = [(d, deadline, now) for d in got]
                offered = leased[:room] if room > 0 else []
                undealt = self._round_robin(key[0], subs, offered, caps) if offered else []
                self._paces.took(key, len(offered) - len(undealt))
                await self._keep(key, undealt + leased[len(offered) :], read_ahead)
                more = more or lease.more
        return more

    def _round_robin(
        self, app: str, subs: list[Subscriber], leased: list[Leased], caps: dict[int, int]
    ) -> list[Leased]:
        """Deal ``leased`` to ``subs`` in turn, as far as their room goes; what none of
        them took."""
        if len(subs) == 1:  # the common case: the whole batch in one call
            sub = subs[0]
            room = min(caps.get(id(sub), 0), len(leased))
            taken = sub.deliver_leases(self.queue, app, None, leased[:room]) if room else 0
            caps[id(sub)] = caps.get(id(sub), 0) - taken
            return leased[taken:]
        undealt: list[Leased] = []
        for item in leased:
            for _ in range(len(subs)):
                sub = subs[self._next % len(subs)]
                self._next = (self._next + 1) % len(subs)
                if caps.get(id(sub), 0) > 0 and sub.deliver_leases(self.queue, app, None, [item]):
                    caps[id(sub)] -= 1
                    break
            else:
                undealt.append(item)
        return undealt

    # ---------------------------------------------------------------- read-ahead

    def _ahead_size(self, key: tuple[str, str]) -> int:
        """How much ``key`` keeps read ahead: what its subscribers took per hold since its
        last lease, at most ``READ_AHEAD`` (all of it while its pace is not known yet)."""
        per_hold = self._paces.per(key, READ_AHEAD_HOLD_S, asyncio.get_running_loop().time())
        return READ_AHEAD if per_hold is None else min(READ_AHEAD, per_hold)

    async def _keep(self, key: tuple[str, str], undealt: list[Leased], read_ahead: bool) -> None:
        """What the consumer's subscribers had no room for: kept for their next room (a
        RoundRobin queue, within the process's read-ahead budget), else back to the group
        at once."""
        if not undealt:
            return
        if read_ahead:
            fit = self.hub.ctx.read_ahead.keep([d for d, _, _ in undealt])
            if fit:
                self._ahead.setdefault(key, deque()).extend(undealt[:fit])
            undealt = undealt[fit:]
            if not undealt:
                return
        await self._return_unread(key[0], [d for d, _, _ in undealt])

    def _still_allowed(self, key: tuple[str, str]) -> bool:
        """Ask the gate again before dealing what was read ahead: a paused or refused
        consumer's deliveries go back unread at once."""
        try:
            allowed = self.hub.ctx.engine.authorize_consumer(self.queue, key[0], key[1])
        except EngineError:
            allowed = False
        if not allowed:
            self._drop_ahead({}, only=key)
            self._block(key, 1000)
        return allowed

    def _drop_ahead(
        self,
        consumers: dict[tuple[str, str], list[Subscriber]],
        only: tuple[str, str] | None = None,
    ) -> None:
        """Send back unread what was read ahead for a consumer that is gone (or ``only``),
        and what waited past ``READ_AHEAD_HOLD_S`` (so another broker's subscribers get it)."""
        if not self._ahead:
            return
        limit = asyncio.get_running_loop().time() - READ_AHEAD_HOLD_S
        for key in list(self._ahead):
            queue = self._ahead[key]
            everything = key == only or (only is None and key not in consumers)
            stale = []
            while queue and (everything or queue[0][2] <= limit):
                stale.append(queue.popleft()[0])
            if not queue:
                del self._ahead[key]
            if stale:
                self.hub.ctx.read_ahead.release(stale)
                self.hub.spawn(self._return_unread(key[0], stale))

    def return_ahead(self) -> None:
        """Everything read ahead goes back unread (the dispatcher stops)."""
        self._drop_ahead({})

    async def _return_unread(self, app: str, deliveries: list[Delivery]) -> None:
        """Back to the group, due at once (the engine marks redelivered only those
        delivered before)."""
        try:
            await self.hub.ctx.engine.return_unread(self.queue, app, deliveries)
        except EngineError as exc:  # a deleted queue (Redis trouble: the engine retries)
            log.info("VibeMQ %s: read-ahead not returned: %s", self.queue, exc)

    async def _members(self, tracked: bool, lease_ms: int) -> bool:
        """FanOut: each subscriber leases from its own member progress."""
        more = False
        engine = self.hub.ctx.engine
        for sub in list(self.subscribers):
            key = (sub.acting_app(self.queue), sub.peer)
            room = (
                sub.capacity(self.queue)
                if tracked
                else (TAKE_BATCH if sub.capacity(self.queue) else 0)
            )
            if room <= 0 or not self._ready(key):
                continue
            member = sub.member_id(self.queue)
            if self._caught_up.holds((*key, member), engine.now_ms()):
                continue  # caught up: an ack of any member does not make it lease again
            lease = await self._lease(key, room, sub.key, lease_ms, member)
            if sub.closed:  # it left while the lease was on its way
                await self._left_meanwhile(sub, key[0], member, lease)
                continue
            if lease is None or not lease.deliveries:
                continue
            got = lease.deliveries
            more = more or lease.more
            if tracked:
                deadline = engine.now_ms() + lease_ms
                written = sub.deliver_leases(
                    self.queue, key[0], member, [(d, deadline) for d in got]
                )
                for partition, indexes in by_partition(got[written:]).items():  # it left
                    await engine.release(self.queue, key[0], partition, indexes, client_id=member)
                continue
            written = [d for d in got if sub.deliver_copy(self.queue, d)]
            for partition, indexes in by_partition(got).items():  # no acks: settled once written
                await engine.settle(self.queue, key[0], partition, indexes, client_id=member)
            dropped = len(got) - len(written)
            if dropped:
                self.hub.ctx.counters["fanout_dropped"] += dropped
        return more

    async def _left_meanwhile(
        self, sub: Subscriber, app: str, member: str, lease: Lease | None
    ) -> None:
        """A member's lease came back after its connection closed. If Redis ran the lease
        after the member's progress was deleted at the close, the lease made it again
        (for a member that never comes back: for good); so the member leaves once more,
        after handing a durable member's leases back for its next connection."""
        if lease is not None and lease.deliveries and sub.durable:
            engine = self.hub.ctx.engine
            for partition, indexes in by_partition(lease.deliveries).items():
                with contextlib.suppress(EngineError):
                    await engine.release(self.queue, app, partition, indexes, client_id=member)
        await sub.leave_group(self.queue)


class Hub:
    """This process's subscriptions, dispatchers and timers."""

    def __init__(self, ctx: ServerContext) -> None:
        self.ctx = ctx
        self.dispatchers: dict[str, QueueDispatcher] = {}
        self.sessions: set[Subscriber] = set()
        self._timer: asyncio.Task[None] | None = None
        self._paused = False
        self._background: set[asyncio.Task[None]] = set()

    def spawn(self, coro) -> None:
        """Run ``coro`` in the background, keeping a reference until it ends."""
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def start(self) -> None:
        self._timer = asyncio.create_task(self._timers(), name="vibemq-timers")
        self.ctx.watcher.on_change(self._catalog_changed)

    def _catalog_changed(self, _snapshot: object) -> None:
        try:
            for disp in list(self.dispatchers.values()):
                disp.catalog_changed()
        except Exception:  # the watcher's other listeners still run
            log.exception("VibeMQ dispatchers missed a catalog change")

    async def stop(self) -> None:
        """Stop dispatching (sessions are closed by their transports)."""
        self._paused = True
        self.ctx.watcher.off_change(self._catalog_changed)
        if self._timer is not None:
            await cancel_and_wait(self._timer)
        for disp in list(self.dispatchers.values()):
            await cancel_and_wait(disp.task)
        self.dispatchers.clear()

    def pause_dispatch(self) -> None:
        """Stop taking new messages (graceful shutdown); timers keep running."""
        self._paused = True
        for disp in list(self.dispatchers.values()):
            if disp.task is not None:
                disp.task.cancel()

    # ---------------------------------------------------------------- subscriptions

    async def join(self, queue: str, sub: Subscriber) -> None:
        """Before a subscription is acknowledged: a fan-out subscriber joins its group
        as a member, from the queue's dispatch mark (so whatever is published after the
        acknowledgement is its too)."""
        settings = self.ctx.queue_settings(queue)
        if settings is not None and settings.delivery_mode in FANOUT_MODES:
            # held by this process: should it die, the member leaves as a close makes it
            keep = self.ctx.config.fanout_retention_ms if sub.durable else None
            await self.ctx.engine.join(
                queue, sub.acting_app(queue), sub.member_id(queue), held=True, keep_ms=keep
            )

    async def subscribe(self, queue: str, sub: Subscriber) -> None:
        """Deliver ``queue`` to ``sub`` from now on (after :meth:`join`)."""
        disp = self.dispatchers.get(queue)
        if disp is None:
            disp = self.dispatchers[queue] = QueueDispatcher(self, queue)
        joined = sub not in disp.subscribers
        if joined:
            disp.subscribers.append(sub)
        # Started before the await below: a subscriber whose connection went meanwhile is
        # cancelled there, and a dispatcher never started was never dropped — one per queue
        # so subscribed stayed for good. A running one ends, and goes, once nobody is left.
        if disp.task is None and not self._paused:
            disp.start()
        disp.kick()
        if joined:
            await self.ctx.registry.join(queue, sub.key)

    async def unsubscribe(self, queue: str, sub: Subscriber) -> None:
        disp = self.dispatchers.get(queue)
        if disp is not None and sub in disp.subscribers:
            disp.subscribers.remove(sub)
            disp.left(sub)
            await self.ctx.registry.leave(queue, sub.key)
            if not disp.subscribers:
                disp.kick()

    def wake(self, queue: str) -> None:
        """A subscriber of ``queue`` may take more now."""
        disp = self.dispatchers.get(queue)
        if disp is not None:
            disp.kick()

    def _dispatcher_done(self, disp: QueueDispatcher) -> None:
        if self.dispatchers.get(disp.queue) is not disp:
            return
        if disp.subscribers and not self._paused:
            if disp.crashed:  # a bug that recurs at once must not spin the process
                asyncio.get_running_loop().call_later(RESTART_S, self._restart, disp)
            else:
                disp.start()  # a subscriber arrived while it was finishing
            return
        del self.dispatchers[disp.queue]

    def _restart(self, disp: QueueDispatcher) -> None:
        if self.dispatchers.get(disp.queue) is not disp or self._paused:
            return
        if not disp.subscribers:
            del self.dispatchers[disp.queue]
        elif disp.task is None or disp.task.done():
            disp.start()

    # ---------------------------------------------------------------- timers

    async def _timers(self) -> None:
        last_refresh = 0.0
        while True:
            await asyncio.sleep(self.ctx.config.timer_interval)
            try:
                await self._tick_sessions(self.ctx.engine.now_ms())
                await self._sweep_ttl()
                if time.monotonic() - last_refresh >= REGISTRY_REFRESH_S:
                    last_refresh = time.monotonic()
                    await self.ctx.registry.renew(
                        [(q, s.key) for q, d in self.dispatchers.items() for s in d.subscribers]
                    )
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("VibeMQ timers failed; retrying")

    async def _tick_sessions(self, now: int) -> None:
        """Each session's timers (a function of its own: a loop variable left in the
        timers' frame kept the last session, closed or not, until the next tick), all at
        once: their engine calls go out together, and a slow one holds up no other."""
        results = await asyncio.gather(
            *(sub.tick(now) for sub in list(self.sessions)), return_exceptions=True
        )
        for failed in results:
            if isinstance(failed, Exception):
                log.error("VibeMQ session timers failed", exc_info=failed)

    async def _sweep_ttl(self) -> None:
        """Expire TTL'd messages nobody was handed yet (§11: every second), for the
        queues this broker leads — also those no subscriber consumes."""
        broker = self.ctx.broker_id
        if broker is None:
            return  # the web process leaves sweeping to the brokers
        codes = [
            code
            for code, info in self.ctx.snapshot.topics.items()
            if info.queue.message_ttl_ms is not None and info.leader_of(0) in (None, broker)
        ]
        failed = 0
        for i in range(0, len(codes), SWEEP_CHUNK):  # a chunk's calls go out together
            chunk = codes[i : i + SWEEP_CHUNK]
            done = await asyncio.gather(
                *(self.ctx.engine.expire(code) for code in chunk), return_exceptions=True
            )
            failed += sum(isinstance(r, Exception) for r in done)
        if failed:
            log.warning(
                "VibeMQ TTL sweep: %d of %d queues failed; next round retries", failed, len(codes)
            )

    async def drop_queue(self, queue: str) -> None:
        """A deleted queue: its local subscribers are unsubscribed silently."""
        disp = self.dispatchers.get(queue)
        if disp is not None:
            for sub in list(disp.subscribers):
                sub.drop_subscription(queue)
            disp.subscribers.clear()
            disp.kick()
        await self.ctx.registry.clear(queue)
