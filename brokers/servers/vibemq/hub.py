"""Dispatch: queues → this process's subscribers (vibemq.md §7, §9), on consumer groups.

A queue is a catalog topic like any other, so its subscribers get what every protocol's
producers stored. One :class:`QueueDispatcher` per queue with local subscribers leases from
the engine whenever some subscriber has room, and sleeps on the engine's notification for
the queue (never longer than ``timer_interval``, which is also how often ack deadlines are
checked). Every lease passes the engine's gate: policy, blacklist, pause, rate limit.

* RoundRobin and PriorityBased: subscribers compete as their acting app's consumer group.
  The dispatcher leases per consumer — the (app, address) pairs of its subscribers — as
  much as they have room for, and deals the batch to that consumer's subscribers in turn.
* FanOutWithAck: each subscriber is a *member* of its app's group with its own progress
  (``<app>#<clientId>`` for a durable subscriber, else its connection's own) that starts
  where it joined; its acks settle it, and a durable member's unacked messages wait for its
  next connection to any broker. Retries, TTL and the dead-letter queue are the engine's.
* FanOutWithoutAck: likewise a member each, settling at once what it was written.

Dispatchers of several processes compete for the same group through the engine.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Protocol

from brokers.engine import (
    AccessDenied,
    Delivery,
    EngineError,
    RateLimited,
    cancel_and_wait,
)
from brokers.servers.vibemq.context import ServerContext

log = logging.getLogger("mqcloud.vibemq")
FANOUT_MODES = ("FanOutWithAck", "FanOutWithoutAck")
TAKE_BATCH = 64
REGISTRY_REFRESH_S = 5.0
SWEEP_CHUNK = 256  # TTL queues whose sweep calls go out together


class Subscriber(Protocol):
    """What the hub needs of a session."""

    key: str
    peer: str

    def acting_app(self, queue: str) -> str: ...
    def member_id(self, queue: str) -> str: ...
    def capacity(self, queue: str) -> int: ...
    def deliver_lease(
        self, queue: str, app: str, member: str | None, delivery: Delivery, deadline_ms: int
    ) -> bool: ...
    def deliver_copy(self, queue: str, delivery: Delivery) -> bool: ...
    def drop_subscription(self, queue: str) -> None: ...
    async def tick(self, now_ms: int) -> None: ...


class QueueDispatcher:
    """Feeds one queue's local subscribers."""

    def __init__(self, hub: Hub, queue: str) -> None:
        self.hub, self.queue = hub, queue
        self.subscribers: list[Subscriber] = []
        self.wakeup = asyncio.Event()
        self._next = 0
        self.task: asyncio.Task[None] | None = None
        self._blocked: dict[tuple[str, str], float] = {}
        """Consumer (app, address) → loop time before which it is not leased for again
        (over its rate limit, or refused by the gate)."""

    @property
    def owner(self) -> str:
        """Who holds the competing leases this dispatcher takes (a subscriber's messages
        are released one by one when it goes; a crashed process's leases expire)."""
        return f"vibemq:{self.hub.ctx.node}:{self.queue}"

    def consumers(self) -> dict[tuple[str, str], list[Subscriber]]:
        """The local subscribers by the consumer they take as: (app, address)."""
        groups: dict[tuple[str, str], list[Subscriber]] = {}
        for sub in self.subscribers:
            groups.setdefault((sub.acting_app(self.queue), sub.peer), []).append(sub)
        return groups

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
        self.task = asyncio.create_task(self._run(), name=f"vibemq-dispatch-{self.queue}")

    async def _run(self) -> None:
        ctx = self.hub.ctx
        try:
            async with ctx.engine.notifier.watch(self.queue) as notified:
                while self.subscribers:
                    notified.clear()
                    self.wakeup.clear()
                    try:
                        full = await self._round()
                    except EngineError as exc:
                        log.warning("VibeMQ dispatch on %s failed: %s", self.queue, exc)
                        full = False
                    if full:
                        continue
                    waits = [asyncio.ensure_future(e.wait()) for e in (notified, self.wakeup)]
                    try:
                        await asyncio.wait(
                            waits,
                            timeout=ctx.config.timer_interval,
                            return_when=asyncio.FIRST_COMPLETED,
                        )
                    finally:
                        for w in waits:
                            w.cancel()
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("VibeMQ dispatcher of %s stopped", self.queue)
        finally:
            self.hub._dispatcher_done(self)

    async def _round(self) -> bool:
        """Lease and hand out one batch per consumer; True if more may be waiting now."""
        settings = self.hub.ctx.queue_settings(self.queue)
        if settings is None:  # deleted: subscribers are dropped silently
            for sub in list(self.subscribers):
                sub.drop_subscription(self.queue)
            self.subscribers.clear()
            return False
        lease_ms = self.hub.ctx.config.ack_timeout_ms
        if settings.delivery_mode in FANOUT_MODES:
            return await self._members(settings.delivery_mode == "FanOutWithAck", lease_ms)
        return await self._competing(lease_ms)

    async def _lease(
        self, key: tuple[str, str], count: int, owner: str, lease_ms: int, member: str | None
    ) -> list[Delivery] | None:
        """A lease through the gate; None when the consumer is held back for a while."""
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
        return lease.deliveries

    async def _competing(self, lease_ms: int) -> bool:
        more = False
        for key, subs in self.consumers().items():
            if not self._ready(key):
                continue
            caps = {id(s): s.capacity(self.queue) for s in subs}
            want = min(TAKE_BATCH, sum(caps.values()))
            if want <= 0:
                continue
            got = await self._lease(key, want, self.owner, lease_ms, None)
            if got:
                await self._round_robin(key[0], subs, got, caps, lease_ms)
                more = more or len(got) == want
        return more

    async def _round_robin(
        self,
        app: str,
        subs: list[Subscriber],
        got: list[Delivery],
        caps: dict[int, int],
        lease_ms: int,
    ) -> None:
        deadline = self.hub.ctx.engine.now_ms() + lease_ms
        unplaced: dict[int, list[int]] = {}
        for delivery in got:
            for _ in range(len(subs)):
                sub = subs[self._next % len(subs)]
                self._next = (self._next + 1) % len(subs)
                if caps.get(id(sub), 0) > 0 and sub.deliver_lease(
                    self.queue, app, None, delivery, deadline
                ):
                    caps[id(sub)] -= 1
                    break
            else:
                unplaced.setdefault(delivery.partition, []).append(delivery.index)
        for partition, indexes in unplaced.items():  # they left meanwhile: back at once
            await self.hub.ctx.engine.release(self.queue, app, partition, indexes)

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
            got = await self._lease(key, room, sub.key, lease_ms, member)
            if not got:
                continue
            more = more or len(got) == room
            if tracked:
                deadline = engine.now_ms() + lease_ms
                for d in got:
                    if not sub.deliver_lease(self.queue, key[0], member, d, deadline):
                        await engine.release(
                            self.queue, key[0], d.partition, [d.index], client_id=member
                        )
                continue
            written = [d for d in got if sub.deliver_copy(self.queue, d)]
            for partition in {d.partition for d in got}:  # no acks: settled once written
                await engine.settle(
                    self.queue,
                    key[0],
                    partition,
                    [d.index for d in got if d.partition == partition],
                    client_id=member,
                )
            dropped = len(got) - len(written)
            if dropped:
                self.hub.ctx.counters["fanout_dropped"] += dropped
        return more


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

    async def stop(self) -> None:
        """Stop dispatching (sessions are closed by their transports)."""
        self._paused = True
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
            await self.ctx.engine.join(queue, sub.acting_app(queue), sub.member_id(queue))

    async def subscribe(self, queue: str, sub: Subscriber) -> None:
        """Deliver ``queue`` to ``sub`` from now on (after :meth:`join`)."""
        disp = self.dispatchers.get(queue)
        if disp is None:
            disp = self.dispatchers[queue] = QueueDispatcher(self, queue)
        if sub not in disp.subscribers:
            disp.subscribers.append(sub)
            await self.ctx.registry.join(queue, sub.key)
        if disp.task is None and not self._paused:
            disp.start()
        disp.wakeup.set()

    async def unsubscribe(self, queue: str, sub: Subscriber) -> None:
        disp = self.dispatchers.get(queue)
        if disp is not None and sub in disp.subscribers:
            disp.subscribers.remove(sub)
            await self.ctx.registry.leave(queue, sub.key)
            if not disp.subscribers:
                disp.wakeup.set()

    def wake(self, queue: str) -> None:
        """A subscriber of ``queue`` may take more now."""
        disp = self.dispatchers.get(queue)
        if disp is not None:
            disp.wakeup.set()

    def _dispatcher_done(self, disp: QueueDispatcher) -> None:
        if self.dispatchers.get(disp.queue) is not disp:
            return
        if disp.subscribers and not self._paused:
            disp.start()  # a subscriber arrived while it was finishing
            return
        del self.dispatchers[disp.queue]

    # ---------------------------------------------------------------- timers

    async def _timers(self) -> None:
        last_refresh = 0.0
        while True:
            await asyncio.sleep(self.ctx.config.timer_interval)
            try:
                now = self.ctx.engine.now_ms()
                for sub in list(self.sessions):
                    await sub.tick(now)
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
            disp.wakeup.set()
        await self.ctx.registry.clear(queue)
