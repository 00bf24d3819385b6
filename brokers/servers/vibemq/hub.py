"""Dispatch: queues → this process's subscribers (vibemq.md §7, §9).

One :class:`QueueDispatcher` per queue with local subscribers takes ready messages from
the engine whenever some subscriber is eligible, and sleeps on the engine's notification
for the queue (never polling faster than ``timer_interval``, which is also how often ack
deadlines and retries are checked). RoundRobin and PriorityBased take for each consumer
— the (app, address) pairs of the local subscribers, each past the engine's gate: its
policy, blacklist, pause and rate limit — and hand each leased message to that consumer's
next eligible subscriber in turn. FanOutWithAck copies each taken message, in Redis, to
every subscriber identity present in the cluster (:mod:`brokers.engine.copies`) and each
process's dispatcher then claims its subscribers' copies through the gate — so they
survive a reconnect to another process and a broker crash. FanOutWithoutAck publishes
each taken message on the queue's fan channel (see :mod:`.fanout`) for every process to
hand on to the subscribers the gate admits. Dispatchers of several processes compete
for the same queue through the engine.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from typing import Protocol

from brokers.engine import (
    AccessDenied,
    Claim,
    Delivery,
    EngineError,
    FanoutCopies,
    QueueSettings,
    RateLimited,
    cancel_and_wait,
)
from brokers.servers.vibemq.context import ServerContext
from brokers.servers.vibemq.fanout import FanoutListener, encode_copy, fan_channel

log = logging.getLogger("mqcloud.vibemq")
FANOUT_MODES = ("FanOutWithAck", "FanOutWithoutAck")
TAKE_BATCH = 64
REGISTRY_REFRESH_S = 5.0


class Subscriber(Protocol):
    """What the hub needs of a session."""

    key: str
    fan_identity: str
    fan_queues: set[str]
    peer: str

    def acting_app(self, queue: str) -> str: ...
    def capacity(self, queue: str) -> int: ...
    def deliver_lease(self, queue: str, delivery: Delivery, deadline_ms: int) -> bool: ...
    def deliver_claimed(self, queue: str, deliveries: list[Delivery]) -> list[int]: ...
    def deliver_copy(self, queue: str, delivery: Delivery) -> None: ...
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
        """Consumer (app, address) → loop time before which it is not taken for again
        (over its rate limit, or refused by the gate)."""
        self.copies_in: deque[Delivery] = deque()
        """FanOutWithoutAck copies received, waiting to be handed on."""

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
        """Take and hand out one batch; True if more may be waiting right away."""
        ctx = self.hub.ctx
        settings = ctx.queue_settings(self.queue)
        if settings is None:  # deleted: subscribers are dropped silently
            for sub in list(self.subscribers):
                sub.drop_subscription(self.queue)
            self.subscribers.clear()
            return False
        lease_ms = ctx.config.ack_timeout_ms
        if settings.delivery_mode == "FanOutWithAck":
            return await self._fan_out_tracked(settings, lease_ms)
        if settings.delivery_mode in FANOUT_MODES:
            await self._hand_on_copies()
            got = await ctx.engine.queue_take_for_copies(
                self.queue, count=TAKE_BATCH, lease_ms=lease_ms
            )
            if got:
                await self._fan_out(got)
            return len(got) == TAKE_BATCH
        more = False
        for key, subs in self.consumers().items():
            if not self._ready(key):
                continue
            caps = {id(s): s.capacity(self.queue) for s in subs}
            want = min(TAKE_BATCH, sum(caps.values()))
            if want <= 0:
                continue
            app, address = key
            try:
                got = await ctx.engine.queue_take(
                    self.queue, app, address=address, count=want, lease_ms=lease_ms
                )
            except RateLimited as exc:
                self._block(key, exc.retry_after_ms)
                continue
            except AccessDenied as exc:  # its policy went away: nothing for it, recheck later
                log.info("VibeMQ %s: %s", self.queue, exc)
                self._block(key, 1000)
                continue
            if got:
                await self._round_robin(subs, got, caps, lease_ms)
            more = more or len(got) == want
        return more

    async def _round_robin(
        self, subs: list[Subscriber], got: list[Delivery], caps: dict[int, int], lease_ms: int
    ) -> None:
        deadline = self.hub.ctx.engine.now_ms() + lease_ms
        unplaced: list[int] = []
        for delivery in got:
            for _ in range(len(subs)):
                sub = subs[self._next % len(subs)]
                self._next = (self._next + 1) % len(subs)
                if caps.get(id(sub), 0) > 0 and sub.deliver_lease(self.queue, delivery, deadline):
                    caps[id(sub)] -= 1
                    break
            else:
                unplaced.append(delivery.index)
        if unplaced:  # every subscriber left meanwhile: back to the head at once
            await self.hub.ctx.engine.queue_release(self.queue, unplaced)

    async def _fan_out_tracked(self, settings: QueueSettings, lease_ms: int) -> bool:
        """Copy taken messages to every identity present, then claim for the local
        subscribers; True if more may be waiting right away."""
        ctx = self.hub.ctx
        copies = self.hub.copies(self.queue)
        got = await ctx.engine.queue_take_for_copies(
            self.queue, count=TAKE_BATCH, lease_ms=lease_ms
        )
        more = False
        if got:
            present, dropped = await copies.assign(got, max_pending=settings.max_queue_size)
            ctx.counters["fanout_dropped"] += dropped
            indexes = [d.index for d in got]
            if present:
                await ctx.engine.queue_ack(self.queue, indexes)
                more = len(got) == TAKE_BATCH
            else:  # every subscriber left meanwhile: the messages wait in the queue
                await ctx.engine.queue_release(self.queue, indexes)
        for sub in list(self.subscribers):
            room = sub.capacity(self.queue)
            key = (sub.acting_app(self.queue), sub.peer)
            if room <= 0 or not self._ready(key):
                continue
            try:
                claim = await ctx.engine.claim_copies(
                    self.queue,
                    key[0],
                    sub.fan_identity,
                    address=sub.peer,
                    count=room,
                    lease_ms=lease_ms,
                    max_retry=settings.max_retry_attempts,
                    retention_ms=ctx.config.fanout_retention_ms,
                )
            except RateLimited as exc:
                self._block(key, exc.retry_after_ms)
                continue
            except AccessDenied as exc:
                log.info("VibeMQ %s: %s", self.queue, exc)
                self._block(key, 1000)
                continue
            await self.hub.hand_over(self.queue, sub, claim, settings)
            more = more or len(claim.deliveries) == room
        return more

    async def _hand_on_copies(self) -> None:
        """FanOutWithoutAck copies received since the last round, to each consumer of
        the local subscribers as far as the gate lets them through (a paused, refused or
        rate-limited consumer misses them: copies without ack are not kept)."""
        copies, self.copies_in = list(self.copies_in), deque()
        if not copies:
            return
        engine, counters = self.hub.ctx.engine, self.hub.ctx.counters
        for (app, address), subs in self.consumers().items():
            try:
                admitted = await engine.admit_deliveries(
                    self.queue, app, len(copies), address=address
                )
            except AccessDenied:
                admitted = 0
            counters["fanout_dropped"] += (len(copies) - admitted) * len(subs)
            for sub in subs:
                for delivery in copies[:admitted]:
                    sub.deliver_copy(self.queue, delivery)

    async def _fan_out(self, got: list[Delivery]) -> None:
        redis = self.hub.ctx.engine.redis
        pipe = redis.pipeline(transaction=False)
        for delivery in got:
            pipe.publish(fan_channel(self.queue), encode_copy(delivery))
        await pipe.execute()
        await self.hub.ctx.engine.queue_ack(self.queue, [d.index for d in got])


class Hub:
    """This process's subscriptions, dispatchers and timers."""

    def __init__(self, ctx: ServerContext) -> None:
        self.ctx = ctx
        self.dispatchers: dict[str, QueueDispatcher] = {}
        self.sessions: set[Subscriber] = set()
        self._fanout = FanoutListener(ctx.engine.redis, self._copy)
        self._timer: asyncio.Task[None] | None = None
        self._paused = False
        self._background: set[asyncio.Task[None]] = set()

    def spawn(self, coro) -> None:
        """Run ``coro`` in the background, keeping a reference until it ends."""
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def start(self) -> None:
        await self._fanout.start()
        self._timer = asyncio.create_task(self._timers(), name="vibemq-timers")

    async def stop(self) -> None:
        """Stop dispatching (sessions are closed by their transports)."""
        self._paused = True
        if self._timer is not None:
            await cancel_and_wait(self._timer)
        for disp in list(self.dispatchers.values()):
            await cancel_and_wait(disp.task)
        self.dispatchers.clear()
        await self._fanout.stop()

    def pause_dispatch(self) -> None:
        """Stop taking new messages (graceful shutdown); timers keep running."""
        self._paused = True
        for disp in list(self.dispatchers.values()):
            if disp.task is not None:
                disp.task.cancel()

    def copies(self, queue: str) -> FanoutCopies:
        """The FanOutWithAck copies store of ``queue``."""
        return self.ctx.engine.fanout_copies(
            queue, retention_ms=self.ctx.config.fanout_retention_ms
        )

    async def hand_over(
        self, queue: str, sub: Subscriber, claim: Claim, settings: QueueSettings
    ) -> None:
        """Deliver claimed copies; dead-letter the expired (§11) and those out of
        retries (§7), then forget them; copies the subscriber could not take go back."""
        engine, identity = self.ctx.engine, sub.fan_identity
        now, ttl = engine.now_ms(), settings.message_ttl_ms
        live: list[Delivery] = []
        dead: list[tuple[Delivery, str, int]] = []
        for d in claim.deliveries:
            if not d.record:
                dead.append((d, "", 0))
            elif ttl is not None and d.message.store_time_ms + ttl <= now:
                dead.append((d, "MessageExpired", d.attempts - 1))
            else:
                live.append(d)
                if d.attempts > 1:
                    self.ctx.counters["retries"] += 1
        for d in claim.dead:
            expired = ttl is not None and d.record and d.message.store_time_ms + ttl <= now
            dead.append((d, "MessageExpired" if expired else "MaxRetriesExceeded", d.attempts))
        for d, reason, attempts in dead:
            if reason:
                await engine.queue_dead_letter(queue, d.record, reason=reason, attempts=attempts)
                self.ctx.counters["dead_lettered"] += 1
        copies = self.copies(queue)
        await copies.ack(identity, [d.index for d, _, _ in dead])
        await copies.release(identity, sub.deliver_claimed(queue, live))

    # ---------------------------------------------------------------- subscriptions

    async def subscribe(self, queue: str, sub: Subscriber) -> None:
        disp = self.dispatchers.get(queue)
        if disp is None:
            disp = self.dispatchers[queue] = QueueDispatcher(self, queue)
        if sub not in disp.subscribers:
            disp.subscribers.append(sub)
            await self._fanout.follow(queue)
            await self.ctx.registry.add(queue, sub.key)
            settings = self.ctx.queue_settings(queue)
            if settings is not None and settings.delivery_mode == "FanOutWithAck":
                sub.fan_queues.add(queue)
                await self.copies(queue).join(
                    [(sub.fan_identity, sub.key)], self.ctx.config.registry_ttl_ms
                )
        if disp.task is None and not self._paused:
            disp.start()
        disp.wakeup.set()

    async def unsubscribe(self, queue: str, sub: Subscriber) -> None:
        disp = self.dispatchers.get(queue)
        if disp is not None and sub in disp.subscribers:
            disp.subscribers.remove(sub)
            await self.ctx.registry.remove(queue, sub.key)
            if queue in sub.fan_queues:
                await self.copies(queue).leave(sub.fan_identity, sub.key)
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
        if not self._paused:
            self.spawn(self._fanout.unfollow(disp.queue))

    def _copy(self, queue: str, delivery: Delivery) -> None:
        disp = self.dispatchers.get(queue)
        settings = self.ctx.queue_settings(queue)
        if disp is None or settings is None:
            return
        if settings.delivery_mode != "FanOutWithoutAck":
            return
        if len(disp.copies_in) >= self.ctx.config.fanout_buffer:
            disp.copies_in.popleft()  # the dispatcher is behind: the oldest copy goes
            self.ctx.counters["fanout_dropped"] += 1
        disp.copies_in.append(delivery)
        disp.wakeup.set()

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
                    await self._refresh_presence()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("VibeMQ timers failed; retrying")

    async def _refresh_presence(self) -> None:
        """Keep this process's subscribers counted and its fan-out identities present."""
        await self.ctx.registry.refresh(
            [(q, s.key) for q, d in self.dispatchers.items() for s in d.subscribers]
        )
        ttl = self.ctx.config.registry_ttl_ms
        for queue, disp in self.dispatchers.items():
            fans = [(s.fan_identity, s.key) for s in disp.subscribers if queue in s.fan_queues]
            await self.copies(queue).join(fans, ttl)

    async def _sweep_ttl(self) -> None:
        """Expire TTL'd messages of queues nobody here dispatches (§11: every second)."""
        broker = self.ctx.broker_id
        if broker is None:
            return  # the web process leaves sweeping to the brokers
        for code, info in self.ctx.snapshot.topics.items():
            if info.queue.message_ttl_ms is None or code in self.dispatchers:
                continue
            leader = info.leader_of(0)
            if leader is None or leader == broker:
                await self.ctx.engine.queue_sweep(code)

    async def drop_queue(self, queue: str) -> None:
        """A deleted queue: its local subscribers are unsubscribed silently."""
        disp = self.dispatchers.get(queue)
        if disp is not None:
            for sub in list(disp.subscribers):
                sub.drop_subscription(queue)
            disp.subscribers.clear()
            disp.wakeup.set()
        await self.ctx.registry.clear(queue)
