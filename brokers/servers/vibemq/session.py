"""One VibeMQ connection's state and command loop, whatever carries its frames.

A transport (the TCP protocol or the WebSocket consumer) decodes frames and
:meth:`Session.feed` s them; the session processes them strictly in order on its own task
(§4) and writes replies and deliveries through :class:`Transport`. Everything between a
decoded frame and the frames written back lives here and in the :class:`Commands` it is
given (:mod:`.commands`: the handlers), once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections import defaultdict, deque
from collections.abc import Sequence
from typing import Protocol, TypeVar

from brokers.engine import AppInfo, Credential, Delivery, EngineError, cancel_and_wait
from brokers.protocols.vibemq import (
    Ack,
    ErrorCode,
    Frame,
    ProtocolError,
    Publish,
    error_for,
    error_frame,
)
from brokers.servers.protocol_errors import protocol_errors
from brokers.servers.vibemq.context import ServerContext
from brokers.servers.vibemq.hub import FANOUT_MODES, Hub, by_partition, competing_owner
from brokers.servers.vibemq.limits import SlidingWindow
from brokers.servers.vibemq.messages import deliver_json
from brokers.servers.vibemq.tracking import Inflight, Tracked

log = logging.getLogger("mqcloud.vibemq")
ACK_BATCH = 128
F = TypeVar("F", Ack, Publish)


class Transport(Protocol):
    """What a session needs of its connection."""

    client_protocol: str
    """How its clients are listed (:meth:`Engine.client_connected`): ``vibemq`` over
    TCP, ``vibemq-ws`` over WebSocket."""

    def send(self, frame: Frame) -> None:
        """Write one frame (never blocks; the transport buffers)."""

    def send_json(self, body: bytes) -> None:
        """Write one frame already encoded as its JSON text (``encode_json``'s form)."""

    def send_json_many(self, bodies: Sequence[bytes]) -> None:
        """:meth:`send_json` of each of ``bodies``, in order (a dispatch round's
        deliveries: framed and queued in one go)."""

    @property
    def writable(self) -> bool:
        """False while the peer does not keep up with what was written."""

    def close(self, error: ProtocolError | None = None) -> None:
        """Close the connection (``error``: the decode error that made it close)."""

    def frames_done(self) -> None:
        """The session processed a frame (a paused reader may resume)."""


def client_address(peer: object) -> str:
    """``host:port`` (``[v6]:port``) of a socket peer or an ASGI ``client`` pair; '' if
    unknown. Messages record it as their client address (JMQ4 clientIp layout)."""
    if not isinstance(peer, tuple | list) or len(peer) < 2 or not peer[0]:
        return ""
    host, port = str(peer[0]), peer[1]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class Commands(Protocol):
    """What a session runs for its frames (:mod:`.commands` builds it from the handlers,
    so this module needs none of them)."""

    max_run: int
    """Publishes read back to back that are stored together."""

    async def handle(self, session: Session, frame: Frame) -> None: ...
    async def publish(self, session: Session, frames: Sequence[Publish]) -> None: ...


class Session:
    """A connection's authentication, subscriptions and unacknowledged deliveries."""

    def __init__(
        self,
        ctx: ServerContext,
        hub: Hub,
        transport: Transport,
        peer: str,
        commands: Commands,
        address: str = "",
    ) -> None:
        self.ctx, self.hub, self.transport, self.peer = ctx, hub, transport, peer
        self.commands = commands
        self.address = address or peer
        """The client's ``host:port`` (``[v6]:port``), recorded with what it publishes;
        ``peer`` (the host alone) groups subscribers and feeds the connection limits."""
        self.key = uuid.uuid4().hex
        self.app: AppInfo | None = None
        self.credential: Credential | None = None
        """The app token ``connect`` authenticated with, held while the connection lasts:
        rotating it in the console closes the connection (:mod:`brokers.engine.credentials`)."""
        self.client_id: str | None = None
        """``headers.clientId`` of connect: names a durable fan-out subscriber."""
        self.client_version = ""
        """``headers.clientVersion`` of connect, for the client listing."""
        self.listed_as = ""
        """The app this connection is listed under (:meth:`Engine.client_connected`): its
        token's, or for an anonymous client the anonymous app it last acted as."""
        self.authenticated = False
        self.subscriptions: set[str] = set()
        self.joined: set[str] = set()
        """Every queue this connection subscribed to (unsubscribed since or not): a
        fan-out member leaves its group in each when the connection closes."""
        self.inflight = Inflight()
        self.inbox: dict[str, deque[Delivery]] = defaultdict(deque)
        self.closed = False
        self.stopping = False
        self._frames: deque[tuple[Frame | ProtocolError, int]] = deque()
        """Fed frames not processed yet, each with its wire bytes (a deque and an event:
        an asyncio.Queue's bookkeeping cost more than the rest of an ack's handling)."""
        self._fed = asyncio.Event()
        self._held: Frame | ProtocolError | None = None
        self.backlog_bytes = 0
        self._acks: dict[tuple[str, str, str | None, int], list[int]] = defaultdict(list)
        """(queue, app, member, partition) → acked indexes, settled together."""
        self._window = (
            SlidingWindow(ctx.config.frames_per_second, 1.0)
            if ctx.config.frames_per_second
            else None
        )
        self._task: asyncio.Task[None] | None = None
        self._settled = asyncio.Event()
        self._room = asyncio.Event()

    @property
    def app_code(self) -> str:
        return self.app.code if self.app is not None else ""

    def acting_app(self, queue: str) -> str:
        """The app this connection publishes and consumes ``queue`` as: its token's app,
        or — anonymous access allowed — the queue's anonymous app. What that app may do
        is the engine's decision."""
        if self.app is not None:
            return self.app.code
        app = self.ctx.anonymous_app(queue)
        if app != self.listed_as and app and not self.closed:
            self.list_as(app)
        return app

    def list_as(self, app: str) -> None:
        """List this connection as a client of ``app`` (its kind: the transport's
        protocol and the version it stated) until it closes."""
        self.listed_as = app
        self.ctx.engine.client_connected(
            self.address, app, self.transport.client_protocol, version=self.client_version
        )

    def member_id(self, queue: str) -> str:
        """This subscriber's member id in a fan-out queue's group: its ``clientId``
        (durable: a reconnect to any broker goes on from where it was), else its own
        connection's (its progress ends with it)."""
        if self.client_id is not None:
            return self.client_id
        return f"~{self.key}"

    @property
    def durable(self) -> bool:
        return self.client_id is not None

    # ---------------------------------------------------------------- input

    def start(self) -> None:
        """Start processing fed frames."""
        self.hub.sessions.add(self)
        self._task = asyncio.create_task(self._work(), name=f"vibemq-session-{self.key[:8]}")

    def feed(self, event: Frame | ProtocolError, size: int = 0) -> None:
        """A decoded frame (or a decode error) from the transport, ``size`` bytes on the wire."""
        if self.closed or (self.stopping and not isinstance(event, Ack)):
            return  # shutting down: only acks of in-flight deliveries still count
        self._frames.append((event, size))
        self.backlog_bytes += size
        self._fed.set()

    def _take(self) -> Frame | ProtocolError:
        event, size = self._frames.popleft()
        self.backlog_bytes -= size
        return event

    @property
    def backlog(self) -> int:
        """Frames fed and not processed yet (transports pause reading above a limit)."""
        return len(self._frames)

    async def room(self) -> None:
        """Wait while ``max_pending_frames`` frames are queued (transports without their
        own flow control call this before feeding)."""
        while len(self._frames) >= self.ctx.config.max_pending_frames and not self.closed:
            self._room.clear()
            await self._room.wait()

    async def _next(self) -> Frame | ProtocolError:
        if self._held is not None:
            event, self._held = self._held, None
            return event
        while not self._frames:
            self._fed.clear()
            await self._fed.wait()
        return self._take()

    def _run(self, first: F, kind: type[F], limit: int) -> list[F]:
        """``first`` and the frames of its kind read right after it, at most ``limit``:
        publishes are stored together (§6), acks settled in memory in one go (a
        subscriber acks what one read brought in one write)."""
        run = [first]
        while len(run) < limit and self._frames:
            event = self._take()
            if not isinstance(event, kind):
                self._held = event
                break
            run.append(event)
        return run

    async def _work(self) -> None:
        handle, publish = self.commands.handle, self.commands.publish
        while not self.closed:
            event = await self._next()
            self._room.set()
            try:
                if isinstance(event, Ack) and self.authenticated:
                    self.settle_acks(self._run(event, Ack, ACK_BATCH))
                elif isinstance(event, Publish) and self.authenticated:
                    await self._flush_acks()
                    await publish(self, self._run(event, Publish, self.commands.max_run))
                else:
                    await self._flush_acks()
                    await self._process(event, handle)
                pending = sum(map(len, self._acks.values()))
                if not self._frames or pending >= ACK_BATCH:
                    await self._flush_acks()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("VibeMQ session %s failed on a frame", self.key)
                rid = getattr(event, "id", None)
                self.send(error_frame(ErrorCode.SERVER_ERROR, "internal error", request_id=rid))
            self.transport.frames_done()

    def rate_allowed(self) -> bool:
        """One more frame within the connection's frame rate (§14); counted if not."""
        if self._window is None or self._window.allow():
            return True
        self.ctx.counters["rate_limited"] += 1
        return False

    def _admit(self, request_id: str | None) -> bool:
        if self.rate_allowed():
            return True
        self.send(error_frame(ErrorCode.RATE_LIMITED, "frame rate exceeded", request_id=request_id))
        return False

    async def _process(self, event: Frame | ProtocolError, handle) -> None:
        if isinstance(event, ProtocolError):
            protocol_errors.record(
                log,
                "vibemq",
                type(event).__name__,
                "VibeMQ %s from %s: %s",
                type(event).__name__,
                self.peer,
                event,
            )
            if event.close:  # unparseable: best-effort INVALID_MESSAGE, then close (§1)
                reply = error_for(event)
                if reply is not None:
                    self.send(reply)
                self.ctx.counters["errors"] += 1
                self.transport.close(event)
                await self.close()
                return
            if self._admit(event.request_id):
                reply = error_for(event)
                if reply is not None:
                    self.ctx.counters["errors"] += 1
                    self.send(reply)
            return
        if self._admit(event.id):
            await handle(self, event)

    # ---------------------------------------------------------------- output

    def send(self, frame: Frame) -> None:
        """Write a frame unless the connection is gone."""
        if not self.closed:
            self.transport.send(frame)

    def error(self, code: ErrorCode, message: str, request_id: str | None) -> None:
        """Send an ``error`` echoing ``request_id``."""
        self.ctx.counters["errors"] += 1
        self.send(error_frame(code, message, request_id=request_id))

    # ---------------------------------------------------------------- acks

    def settle_acks(self, run: Sequence[Ack], *, admit: bool = True) -> None:
        """Settle in memory the deliveries ``run`` acks (each admitted by the frame rate
        first, unless ``admit`` is false); the engine hears of them in :meth:`_flush_acks`.
        Per run, not per ack: the clock, the counters and the dispatchers' wake-ups."""
        settle, pending = self.inflight.settle, self._acks
        now = self.ctx.engine.now_ms()
        queues: set[str] = set()
        settled = 0
        for frame in run:
            if admit and not self._admit(frame.id):
                continue
            message_id = frame.message_id
            item = settle(message_id, now)
            if item is None:
                log.debug("VibeMQ ack for unknown delivery %r ignored", message_id[:64])
                continue
            d = item.delivery
            pending[(item.queue, item.app, item.member, d.partition)].append(d.index)
            queues.add(item.queue)
            settled += 1
        if not settled:
            return
        self.ctx.counters["acknowledged"] += settled
        self._settled.set()
        for queue in queues:
            self.hub.wake(queue)

    async def _flush_acks(self) -> None:
        """Settle the acks read so far: one engine call per (queue, group, partition)."""
        if not self._acks:
            return
        pending, self._acks = self._acks, defaultdict(list)
        for (queue, app, member, partition), indexes in pending.items():
            try:
                await self.ctx.engine.settle(queue, app, partition, indexes, client_id=member)
            except EngineError as exc:  # a deleted queue (Redis trouble: the engine retries)
                log.info("VibeMQ ack on %s not applied: %s", queue, exc)

    # ---------------------------------------------------------------- deliveries (hub side)

    def capacity(self, queue: str) -> int:
        """How many more ack-tracked deliveries of ``queue`` this subscriber may take."""
        if self.closed or self.stopping or not self.transport.writable:
            return 0
        return max(0, self.ctx.config.max_unacked_per_subscriber - self.inflight.per_queue[queue])

    def deliver_leases(
        self,
        queue: str,
        app: str,
        member: str | None,
        leased: Sequence[tuple[Delivery, int] | tuple[Delivery, int, float]],
    ) -> int:
        """Write messages leased for ``app`` (a fan-out ``member``, or None), each with
        its lease's deadline; how many were written (0 if this subscriber went away).
        One call per dispatch round: it runs per message delivered."""
        if self.closed or queue not in self.subscriptions:
            return 0
        track = self.inflight.add
        retries = latency = 0
        now = self.ctx.engine.now_ms()
        limit = self.ctx.config.max_frame_size
        frames = []
        oversize: list[Delivery] = []
        for item in leased:
            delivery = item[0]
            message_id, frame, stored = deliver_json(queue, delivery)  # the record read once
            if len(frame) > limit:
                oversize.append(delivery)
                continue
            track(Tracked(queue, message_id, delivery, item[1], app, member))
            if delivery.attempts > 1:
                retries += 1
            latency += max(0, now - stored)
            frames.append(frame)
        self.transport.send_json_many(frames)
        counters = self.ctx.counters
        counters["delivered"] += len(frames)
        counters["delivery_latency_ms"] += latency
        if retries:
            counters["retries"] += retries
        if oversize:
            self.hub.spawn(self._fail_oversize(queue, app, member, oversize))
        return len(leased)

    async def _fail_oversize(
        self, queue: str, app: str, member: str | None, deliveries: list[Delivery]
    ) -> None:
        """Messages whose ``deliver`` frame would be over the frame limit (§1: a client
        closes the connection on such a frame; stored by a protocol with larger messages,
        JMQ4 or HTTP-MQ) are not written: each is a failed attempt, so the engine delivers
        it again after its backoff — to a consumer of the group that can take it, a JMQ4
        one — and past the attempt limit dead-letters it. Never written, never dropped."""
        self.ctx.counters["oversize"] += len(deliveries)
        log.warning(
            "VibeMQ: %d message(s) of %s over the %d-byte frame limit not delivered (failed)",
            len(deliveries),
            queue,
            self.ctx.config.max_frame_size,
        )
        for partition, indexes in by_partition(deliveries).items():
            try:
                await self.ctx.engine.fail(queue, app, partition, indexes, client_id=member)
            except EngineError as exc:  # the lease lapses instead: the same outcome, later
                log.info("VibeMQ oversize failure on %s not applied: %s", queue, exc)

    def _delivered(self, stored_ms: int) -> None:
        """Count a delivery and its publish→deliver latency (§15 metrics)."""
        counters = self.ctx.counters
        counters["delivered"] += 1
        counters["delivery_latency_ms"] += max(0, self.ctx.engine.now_ms() - stored_ms)

    def deliver_copy(self, queue: str, delivery: Delivery) -> bool:
        """A FanOutWithoutAck message: written now, or buffered (bounded); False if this
        subscriber went away."""
        if self.closed or queue not in self.subscriptions:
            return False
        inbox = self.inbox[queue]
        inbox.append(delivery)
        if len(inbox) > self.ctx.config.fanout_buffer:
            inbox.popleft()  # a slow subscriber never grows an unbounded buffer
            self.ctx.counters["fanout_dropped"] += 1
        self._drain(queue)
        return True

    def _drain(self, queue: str) -> None:
        inbox = self.inbox.get(queue)
        while inbox and not self.closed and self.transport.writable:
            delivery = inbox.popleft()
            _, frame, stored = deliver_json(queue, delivery, attempt=1)
            if len(frame) > self.ctx.config.max_frame_size:  # no ack, no retry: counted
                self.ctx.counters["oversize"] += 1
                log.warning("VibeMQ: a copy of %s over the frame limit not delivered", queue)
                continue
            self._delivered(stored)
            self.transport.send_json(frame)

    def on_writable(self) -> None:
        """The transport drained: buffered copies and the dispatchers may go on."""
        for queue in list(self.inbox):
            self._drain(queue)
        for queue in self.subscriptions:
            self.hub.wake(queue)

    def drop_subscription(self, queue: str) -> None:
        """The queue was deleted: forget it silently."""
        self.subscriptions.discard(queue)
        self.inbox.pop(queue, None)
        for item in self.inflight.of_queue(queue):
            self.inflight.forget(item)

    async def tick(self, now_ms: int) -> None:
        """Timers (§7): a delivery without an ack in time failed. A competing consumer's
        retry goes to this connection while it is subscribed: the engine keeps the lease
        for it, counted as the next attempt, and it is written again once the backoff
        is over (past the attempt limit the engine dead-letters it). Otherwise — a
        fan-out member's, or the queue unsubscribed — the lease is no longer this
        connection's: the engine delivers it again after its backoff. The engine calls
        of one tick go out together (a hung subscriber's hundred timeouts: one write)."""
        due: list[Tracked] = []
        lapsed: list[Tracked] = []
        for item in self.inflight.items():
            if item.settled:
                continue
            if item.retry_at is not None:
                if item.retry_at <= now_ms:
                    due.append(item)
            elif item.deadline_ms <= now_ms:
                lapsed.append(item)
        kept = await asyncio.gather(*(self._keep_for_retry(item) for item in lapsed))
        for item, was_kept in zip(lapsed, kept, strict=True):
            if not was_kept:
                self.inflight.forget(item)
                self._settled.set()
                self.hub.wake(item.queue)
        if due:
            await asyncio.gather(*(self._retry(item, now_ms) for item in due))
        for queue in list(self.inbox):
            self._drain(queue)

    async def _keep_for_retry(self, item: Tracked) -> bool:
        """Ask the engine to keep ``item``'s failed delivery for this connection's retry;
        whether it did (its lease is this process's, and the attempt was not the last).
        Never for a fan-out member's delivery: its retries are its own already."""
        if item.member is not None:
            return False
        if self.closed or self.stopping or item.queue not in self.subscriptions:
            return False
        d = item.delivery
        try:  # not kept past its TTL (§11): the engine expires it with the lease
            due = await self.ctx.engine.retry_here(
                item.queue,
                item.app,
                d,
                owner=competing_owner(self.ctx.node, item.queue),
                lease_ms=self.ctx.config.ack_timeout_ms + self.ctx.config.retry_margin_ms,
            )
        except EngineError as exc:  # the lease lapses instead: a retry for the group
            log.info("VibeMQ retry on %s not kept: %s", item.queue, exc)
            return False
        if due is None:
            return False
        item.retry_at = due
        item.attempts = (item.attempts or d.attempts) + 1
        item.deadline_ms = due + self.ctx.config.ack_timeout_ms  # a late ack still counts
        return True

    async def _retry(self, item: Tracked, now_ms: int) -> None:
        """Write a kept retry again; back to the group at once if the queue was
        unsubscribed meanwhile, or its message expired (the engine then expires it, §11;
        the connection closing releases it with the others)."""
        item.retry_at = None
        if (
            self.closed
            or item.queue not in self.subscriptions
            or self.ctx.engine.past_ttl(item.queue, item.delivery)
        ):
            self.inflight.forget(item)
            d = item.delivery
            with contextlib.suppress(EngineError):  # unread: the kept delivery never went out
                await self.ctx.engine.release(
                    item.queue, item.app, d.partition, [d.index], unread=True
                )
            self._settled.set()
            self.hub.wake(item.queue)
            return
        _, frame, _ = deliver_json(item.queue, item.delivery, attempt=item.attempts)
        item.deadline_ms = now_ms + self.ctx.config.ack_timeout_ms
        self.ctx.counters["delivered"] += 1
        self.ctx.counters["retries"] += 1
        self.transport.send_json(frame)

    # ---------------------------------------------------------------- end

    def begin_shutdown(self) -> None:
        """The server stops: take no new work; acks are still read and settled."""
        self.stopping = True

    async def wait_settled(self) -> None:
        """Until every unacknowledged delivery was acked (graceful shutdown)."""
        while len(self.inflight) and not self.closed:
            self._settled.clear()
            await self._settled.wait()

    def _settle_read_acks(self) -> None:
        """Acks read before the connection went and not processed yet still count: the
        peer sent them (a client acking its last deliveries, then closing, must not get
        them delivered again to someone else)."""
        events = [] if self._held is None else [self._held]
        self._held = None
        while self._frames:
            events.append(self._take())
        if self.authenticated:
            self.settle_acks([event for event in events if isinstance(event, Ack)], admit=False)

    def hold(self, credential: Credential | None) -> None:
        """Act on ``credential`` from now on (None: on none), releasing the one before."""
        if self.credential is not None:
            self.credential.release()
        self.credential = credential

    def revoked(self) -> None:
        """The token this connection authenticated with was revoked: it ends (§1's close,
        as for a frame it cannot take; the client's next ``connect`` gets AUTH_FAILED)."""
        self.credential = None
        if not self.closed:
            self.transport.close()

    async def close(self) -> None:
        """The connection is gone: unsubscribe, return unacked leases to the queue head."""
        if self.closed:
            return
        self.closed = True
        self.ctx.engine.client_disconnected(self.address)
        self.hold(None)
        self._settled.set()
        self.hub.sessions.discard(self)
        if self._task is not None and self._task is not asyncio.current_task():
            await cancel_and_wait(self._task)
        self._settle_read_acks()
        await self._flush_acks()
        for queue in list(self.subscriptions):
            with contextlib.suppress(Exception):
                await self.hub.unsubscribe(queue, self)
        subscribed, self.subscriptions = self.subscriptions, set()
        leases: dict[tuple[str, str, str | None, int, bool], list[int]] = defaultdict(list)
        now = self.ctx.engine.now_ms()
        for item in self.inflight.items():
            if item.deadline_ms > now:
                d = item.delivery
                unread = item.retry_at is not None  # a kept retry not written yet
                leases[(item.queue, item.app, item.member, d.partition, unread)].append(d.index)
            self.inflight.forget(item)
        for (queue, app, member, partition, unread), indexes in leases.items():
            if member is not None and not self.durable:
                continue  # its own progress ends with it, below
            try:  # back at once for the group, or the durable member's next connection
                await self.ctx.engine.release(
                    queue, app, partition, indexes, client_id=member, unread=unread
                )
            except EngineError as exc:
                log.info("VibeMQ release on %s failed (leases lapse): %s", queue, exc)
        # unsubscribed queues too: their deliveries stayed tracked (§7), and a member of
        # its own (no clientId) never comes back — its progress stayed for good
        for queue in subscribed | self.joined:
            await self.leave_group(queue)
        self.joined.clear()
        self.inbox.clear()

    async def leave_group(self, queue: str) -> None:
        """A fan-out member's progress ends with its subscription; a durable member's waits
        for it a while. Idempotent: the hub calls it again for a member whose lease came
        back after the close."""
        settings = self.ctx.queue_settings(queue)
        if settings is not None and settings.delivery_mode in FANOUT_MODES:
            keep = self.ctx.config.fanout_retention_ms if self.durable else None
            with contextlib.suppress(EngineError):
                await self.ctx.engine.leave(
                    queue, self.acting_app(queue), self.member_id(queue), keep_ms=keep
                )

    async def unsubscribe(self, queue: str) -> None:
        """Stop delivering ``queue`` here. Its unacknowledged deliveries stay tracked
        (§7: an ack still settles them); a fan-out member's progress is left when the
        connection closes (:meth:`close`)."""
        await self.hub.unsubscribe(queue, self)
        self.subscriptions.discard(queue)
        self.inbox.pop(queue, None)  # as a deleted queue's: one per queue ever subscribed
