"""Temp MQs (zbus.md §7, §10, §13.2): reply queues that live and die with a connection.

Decision: a Temp MQ is not a catalog row. It lives in the memory of the broker process
that holds its owner connection and vanishes with that connection, contents included (they
are never persisted, §13.4). A reply queue (made by a ``request``, §10) delivers by
``msgid``: each waiter (a ``request``, or a ``consume`` on the reply queue) waits for one
``msgid``; a stored message goes to the waiter of its own ``msgid``. A queue Temp MQ made by
``create_mq`` is a queue like any other (§7, §9.1), in memory: its messages wait in order
and go to its consumes round robin, each under the consume's ``msgid`` and within its
window — except a message for which a ``request`` that named the queue as its reply
queue waits: that goes to its waiter. It holds at most ``pubsub_buffer`` messages, the
oldest dropped and counted beyond. A pub/sub Temp MQ (PubSub bit, mode 6) copies each
message to every subscriber whose topics match, as a catalog pub/sub MQ does (§9.2:
topics accumulate, a buffer per subscriber bounded at ``pubsub_buffer``, the oldest
dropped and counted, status 200). Any number of waiters may be registered per connection;
a reply that finds no waiter is kept for ``reply_ttl`` seconds (it may have overtaken its
request's registration), then discarded.

A worker connected to another broker of the cluster may produce the reply there: every
Temp MQ is registered in Redis while it lives, and other brokers forward messages for it to
this one (:mod:`.relay`). ``ready`` completes once the registration is written; a request
waits for it before storing, so its reply always finds the queue.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
from collections import deque
from dataclasses import dataclass, field

from brokers.engine import hash_token
from brokers.protocols.zbus import AliasFamily, Message, MqMode, make_delivery, topic_matches
from brokers.servers.zbus.connection import Connection
from brokers.servers.zbus.context import ServerContext
from brokers.servers.zbus.relay import encode_entry

log = logging.getLogger("mqcloud.zbus")


_PUBSUB = int(MqMode.PUBSUB)


@dataclass(eq=False, slots=True)
class TempSubscriber:
    """A connection subscribed to a pub/sub Temp MQ (§9.2): its topics (accumulated over
    its consumes), its current consume, and its buffer."""

    conn: Connection
    topics: set[str] = field(default_factory=set)
    msgid: str | None = None
    window: int = 0
    aliases: AliasFamily = AliasFamily.NONE
    buffer: deque[Message] = field(default_factory=deque)
    dropped: int = 0


@dataclass(eq=False, slots=True)
class Waiter:
    """A connection waiting for replies carrying one ``msgid``."""

    conn: Connection
    window: int
    aliases: AliasFamily


@dataclass(eq=False, slots=True)
class TempSession:
    """A consume of a queue Temp MQ made by ``create_mq``: up to ``window`` messages
    (negative: every one) under its ``msgid``."""

    msgid: str | None
    window: int
    aliases: AliasFamily


@dataclass(eq=False)
class TempMq:
    """One temporary MQ owned by one connection."""

    ctx: ServerContext
    name: str
    mode: int
    owner: Connection
    token: str = ""
    created_ms: int = 0
    waiters: dict[str, Waiter] = field(default_factory=dict)
    pending: dict[str, list[tuple[Message, asyncio.TimerHandle]]] = field(default_factory=dict)
    _watched: set[Connection] = field(default_factory=set)
    entry: bytes = b""
    """Its registry value (owner instance, mode, token hash), see :mod:`.relay`."""
    ready: asyncio.Future[None] | None = None
    """Done once the registration is written (or failed, logged)."""
    registering: int = 0
    """Requests waiting for :attr:`ready` before they are stored: a later request of
    the queue is not stored before them (:func:`~.request.request_now`)."""
    subscribers: dict[Connection, TempSubscriber] = field(default_factory=dict)
    """Of a pub/sub Temp MQ (PubSub bit set): its subscribing connections."""
    fifo: bool = False
    """Made by ``create_mq``: a queue of its own; else a reply queue (by ``msgid``)."""
    queued: deque[Message] = field(default_factory=deque)
    """Of a ``fifo`` queue: its messages not yet delivered, oldest first."""
    sessions: dict[Connection, TempSession] = field(default_factory=dict)
    """Of a ``fifo`` queue: its consumes, in the order they are dealt to."""
    dropped: int = 0
    """Of a ``fifo`` queue: messages dropped over ``pubsub_buffer``."""

    @property
    def pubsub(self) -> bool:
        """PubSub bit set: a copy of each message for every matching subscriber (§7, §9.2),
        in memory like everything of a Temp MQ; otherwise messages go to the waiter of
        their ``msgid``."""
        return bool(self.mode & _PUBSUB)

    def subscribe(
        self,
        conn: Connection,
        msgid: str | None,
        window: int,
        topics: list[str],
        aliases: AliasFamily,
    ) -> None:
        """A consume of a pub/sub Temp MQ (§9.2): the connection's topics accumulate, its
        msgid and window are replaced, and what its buffer holds is delivered."""
        sub = self.subscribers.get(conn)
        if sub is None:
            sub = self.subscribers[conn] = TempSubscriber(conn)
            self._watch(conn)
        sub.topics.update(topics)
        sub.msgid, sub.window, sub.aliases = msgid, window, aliases
        self.ctx.consumed(self.name, conn)
        self._drain(sub)

    def _publish(self, message: Message) -> None:
        limit = self.ctx.config.pubsub_buffer
        for sub in self.subscribers.values():
            if not topic_matches(sub.topics, message.topic):
                continue
            if len(sub.buffer) >= limit:  # bounded: the oldest goes, counted
                sub.buffer.popleft()
                sub.dropped += 1
            sub.buffer.append(message)
            self._drain(sub)

    @staticmethod
    def _drain(sub: TempSubscriber) -> None:
        buffer = sub.buffer
        while sub.window != 0 and buffer:
            delivery = make_delivery(buffer[0], msgid=sub.msgid, status=200)
            if not sub.conn.send(delivery, sub.aliases):
                return
            buffer.popleft()
            if sub.window > 0:
                sub.window -= 1

    def opens_to(self, token: str | None) -> bool:
        """Whether ``token`` may take this MQ's messages: any, when it has no access token
        (§9, §12; constant time)."""
        return not self.token or hmac.compare_digest(self.token.encode(), (token or "").encode())

    async def registered(self) -> None:
        """Wait until other brokers can find this Temp MQ."""
        if self.ready is not None:
            await asyncio.shield(self.ready)

    def wait(self, conn: Connection, msgid: str | None, window: int, aliases: AliasFamily) -> None:
        """Register ``conn`` as the waiter for ``msgid`` and hand it what already arrived."""
        key = msgid or ""
        if window == 0:
            self.waiters.pop(key, None)
            return
        waiter = Waiter(conn, window, aliases)
        self.waiters[key] = waiter
        self._watch(conn)
        self.ctx.consumed(self.name, conn)
        for message, timer in self.pending.pop(key, []):
            timer.cancel()
            if not self._hand(key, waiter, message):
                self._keep(key, message)

    def consume(
        self, conn: Connection, msgid: str | None, window: int, aliases: AliasFamily
    ) -> None:
        """A consume of a ``fifo`` queue: it replaces the connection's earlier one (window
        0 only cancels it) and takes its turn in the round robin."""
        self.sessions.pop(conn, None)
        if window == 0:
            return
        self.sessions[conn] = TempSession(msgid, window, aliases)
        self._watch(conn)
        self.ctx.consumed(self.name, conn)
        self._deal()

    def _deal(self) -> None:
        """Hand queued messages to the sessions in turn while both last."""
        queued, sessions = self.queued, self.sessions
        while queued and sessions:
            conn, session = next(iter(sessions.items()))
            del sessions[conn]
            if conn.closed:
                continue
            if not conn.send(make_delivery(queued[0], msgid=session.msgid), session.aliases):
                log.warning("zbus: temp MQ %s dropped a message it cannot encode", self.name)
                queued.popleft()
                sessions[conn] = session
                continue
            queued.popleft()
            if session.window > 0:
                session.window -= 1
            if session.window != 0:
                sessions[conn] = session  # to the end of the line: round robin

    def put(self, message: Message) -> None:
        """A message produced to this MQ: a copy to each matching subscriber of a pub/sub
        Temp MQ; the waiter of its ``msgid`` (a request's reply); else, on a reply queue,
        kept for ``reply_ttl``, and on a ``fifo`` queue queued for its consumes."""
        if self.pubsub:
            self._publish(message)
            return
        key = message.msgid or ""
        waiter = self.waiters.get(key)
        if waiter is not None and self._hand(key, waiter, message):
            return
        if not self.fifo:
            self._keep(key, message)
            return
        if len(self.queued) >= self.ctx.config.pubsub_buffer:
            self.queued.popleft()
            self.dropped += 1
        self.queued.append(message)
        self._deal()

    def unconsumed(self) -> int:
        """Replies kept without a waiter, and the messages a ``fifo`` queue holds."""
        return sum(len(v) for v in self.pending.values()) + len(self.queued)

    def _hand(self, key: str, waiter: Waiter, message: Message) -> bool:
        if waiter.window == 0 or not waiter.conn.send(
            make_delivery(message, msgid=key or None), waiter.aliases
        ):
            return False
        if waiter.window > 0:
            waiter.window -= 1
            if waiter.window == 0 and self.waiters.get(key) is waiter:
                del self.waiters[key]
        return True

    def _keep(self, key: str, message: Message) -> None:
        loop = asyncio.get_running_loop()
        entry: list[tuple[Message, asyncio.TimerHandle]] = self.pending.setdefault(key, [])
        timer = loop.call_later(self.ctx.config.reply_ttl, self._expire, key, message)
        entry.append((message, timer))

    def _expire(self, key: str, message: Message) -> None:
        entries = self.pending.get(key, [])
        entries[:] = [(m, t) for m, t in entries if m is not message]
        if not entries:
            self.pending.pop(key, None)

    def _watch(self, conn: Connection) -> None:
        """Forget ``conn``'s consumes when it closes (one callback per connection)."""
        if conn not in self._watched:
            self._watched.add(conn)
            conn.on_close(lambda: self._forget(conn))

    def _forget(self, conn: Connection) -> None:
        self._watched.discard(conn)
        self.subscribers.pop(conn, None)
        self.sessions.pop(conn, None)
        for key in [k for k, w in self.waiters.items() if w.conn is conn]:
            del self.waiters[key]

    def drop(self) -> None:
        """The owner closed: forget everything."""
        for entries in self.pending.values():
            for _, timer in entries:
                timer.cancel()
        self.pending.clear()
        self.waiters.clear()
        self.subscribers.clear()
        self.queued.clear()
        self.sessions.clear()


def open_temp(
    ctx: ServerContext,
    name: str,
    mode: int,
    owner: Connection,
    token: str = "",
    *,
    fifo: bool = False,
) -> TempMq:
    """Create the temp MQ ``name`` owned by ``owner`` (removed when ``owner`` closes): a
    queue of its own when ``fifo`` (``create_mq``), else a reply queue."""
    temp = TempMq(ctx, name, mode, owner, token, ctx.engine.now_ms(), fifo=fifo)
    ctx.temps[name] = temp
    relay = ctx.relay
    if relay is not None:
        temp.entry = encode_entry(relay.instance, mode, hash_token(token) if token else "")
        temp.ready = asyncio.get_running_loop().create_future()
        task = ctx.spawn(_register(temp), f"zbus-temp-register-{name}")
        task.add_done_callback(lambda _: temp.ready.done() or temp.ready.set_result(None))

    def closed() -> None:
        if ctx.temps.get(name) is temp:
            del ctx.temps[name]
            ctx.activity.pop(name, None)
            if relay is not None:
                ctx.spawn(_unregister(temp), f"zbus-temp-unregister-{name}")
        temp.drop()

    owner.on_close(closed)
    return temp


async def _register(temp: TempMq) -> None:
    assert temp.ready is not None and temp.ctx.relay is not None
    try:
        await temp.ctx.relay.register(temp)
    except Exception:
        log.warning("zbus: registering temp MQ %s failed (renewed later)", temp.name, exc_info=True)
    finally:
        if not temp.ready.done():
            temp.ready.set_result(None)


async def _unregister(temp: TempMq) -> None:
    assert temp.ctx.relay is not None
    await temp.registered()
    await temp.ctx.relay.unregister(temp)
