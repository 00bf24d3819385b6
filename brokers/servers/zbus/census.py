"""The consumers of a broker across its processes (zbus.md §11.2, §13.5).

A broker runs several processes on one port (``runbroker --processes``: ``SO_REUSEPORT``)
and a connection lands on any of them, so what one process holds of an MQ's consumers —
connections that consumed lately or are parked, pub/sub subscribers and their cursors —
is its share only; ``data`` (and the index page, the track reports, ``loadFactor``) must
answer for the broker.

The zbus servers of one broker (same id and address) form a group of engine mailboxes
(:data:`CENSUS`, :meth:`brokers.engine.Mailboxes.broadcast`). A ``data`` broadcasts an
:class:`Ask` (its id, the asker's inbox, the MQ codes wanted or all) and each other
process answers on the asker's inbox with its :class:`Share` of each of those MQs where it
has consumers, made from memory (no store read). ``PUBLISH`` counts who heard the ask, so
the asker waits for exactly that many answers, at most :data:`WAIT_S`: a process that died
is not counted (its subscription went with its connection), and one that hangs delays
``data`` by ``WAIT_S`` and is left out (logged). Temp MQs live in the process of their
owner connection and are not asked about.

Nothing is written while nobody asks: no registry, no renewals, nothing on the consume
paths. An ask costs one publish and one answer per other process, sized by its consumers
of the MQs asked.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Iterable
from typing import Any

import msgspec

from brokers.engine import EngineError
from brokers.protocols.zbus import MqMode
from brokers.servers.zbus.connection import Connection
from brokers.servers.zbus.context import ServerContext

log = logging.getLogger("mqcloud.zbus")

CENSUS = "zbus-census"
"""The mailbox space of the zbus servers' groups (one group per broker)."""
WAIT_S = 1.0
"""The longest a ``data`` waits for the other processes' answers."""


class Share(msgspec.Struct, array_like=True):
    """One process's consumers of one MQ: ``(remoteAddr, status, topics)`` each, and for
    a pub/sub MQ its subscribers' cursors (cursor → how many stand there)."""

    consumers: list[tuple[str, str, list[str]]]
    cursors: dict[int, int] = {}


class Ask(msgspec.Struct, array_like=True):
    """A ``data``'s question to the other processes: the shares of MQs ``codes`` (None:
    of every MQ), answered on inbox ``reply_to`` with the ask's ``id``."""

    id: int
    reply_to: str
    codes: list[str] | None


class Answer(msgspec.Struct, array_like=True):
    """A process's shares for ask ``id``."""

    id: int
    shares: dict[str, Share]


_ASK, _ANSWER = msgspec.msgpack.Decoder(Ask), msgspec.msgpack.Decoder(Answer)
_ENCODER = msgspec.msgpack.Encoder()
_PUBSUB = int(MqMode.PUBSUB)


def local_share(ctx: ServerContext, code: str, pubsub: bool, temp: Any = None) -> Share:
    """This process's consumers of MQ ``code`` (Temp MQ ``temp``, if given): connections
    that consumed within ``consumer_window_s`` or are parked (§13.5); a pub/sub MQ's carry
    their topics and its subscribers their cursors."""
    now = Connection.now()
    recent = ctx.activity.get(code, {})
    parked: dict[Connection, bool] = {}
    topics: dict[Connection, list[str]] = {}
    cursors: dict[int, int] = {}
    if temp is not None:
        for waiter in temp.waiters.values():
            parked[waiter.conn] = True
    elif pubsub:
        runtime = ctx.pubsubs.get(code)
        if runtime is not None:
            for conn, sub in runtime.subscribers.items():
                parked[conn] = sub.window != 0
                topics[conn] = sorted(sub.topics)
            cursors = dict(runtime.cursors())
    else:
        runtime = ctx.queues.get(code)
        for session in runtime.line if runtime else ():
            parked[session.conn] = session.active
    consumers = []
    for conn in set(recent) | set(parked):
        if conn.closed:
            recent.pop(conn, None)
            continue
        waiting = parked.get(conn, False)
        if not waiting and now - recent.get(conn, -1e18) > ctx.config.consumer_window_s:
            continue
        consumers.append((conn.remote_addr, "parked" if waiting else "idle", topics.get(conn, [])))
    return Share(consumers, cursors)


def local_shares(ctx: ServerContext, codes: Iterable[str] | None) -> dict[str, Share]:
    """This process's shares of catalog MQs ``codes`` (None: every MQ it has consumers
    of), those without consumers or subscribers left out."""
    if codes is None:
        codes = set(ctx.activity) | set(ctx.pubsubs) | set(ctx.queues)
    topics, out = ctx.snapshot.topics, {}
    for code in codes:
        topic = topics.get(code)
        if topic is None or code in ctx.temps:
            continue
        share = local_share(ctx, code, bool(topic.zbus_mode & _PUBSUB))
        if share.consumers or share.cursors:
            out[code] = share
    return out


class _Waiting:
    """The answers to one ask, and how many are expected (None until the ask is out)."""

    def __init__(self) -> None:
        self.answers: list[dict[str, Share]] = []
        self.expected: int | None = None
        self.done = asyncio.Event()

    def check(self) -> None:
        if self.expected is not None and len(self.answers) >= self.expected:
            self.done.set()


class Census:
    """This zbus server's membership of its broker's group: it answers the others' asks
    and asks them for their shares."""

    def __init__(self, ctx: ServerContext, group: str) -> None:
        self.ctx, self.group = ctx, group
        self.mailboxes = ctx.engine.mailboxes(CENSUS, 0, group)
        self._ids = itertools.count(1)
        self._waiting: dict[int, _Waiting] = {}

    async def start(self) -> None:
        """Join the group (confirmed): asks broadcast from now on are heard."""
        await self.mailboxes.start(self._answered, self._asked)

    async def stop(self) -> None:
        """Leave the group (asks broadcast afterwards do not count this process)."""
        await self.mailboxes.stop()

    async def others(self, codes: list[str] | None) -> list[dict[str, Share]]:
        """The other processes' shares of MQs ``codes`` (None: all), as many as answered
        within :data:`WAIT_S`; none when the store cannot be reached."""
        if codes == [] or not self.mailboxes.listening:
            return []
        ask_id = next(self._ids)
        waiting = self._waiting[ask_id] = _Waiting()
        try:
            ask = _ENCODER.encode(Ask(ask_id, self.mailboxes.owner, codes))
            heard = await self.mailboxes.broadcast(self.group, ask)
            waiting.expected = max(0, heard - 1)  # this process heard it too
            waiting.check()
            async with asyncio.timeout(WAIT_S):
                await waiting.done.wait()
        except TimeoutError:
            log.warning(
                "zbus data: %d of %s other processes answered in %.1f s; counted without the rest",
                len(waiting.answers),
                waiting.expected,
                WAIT_S,
            )
        except EngineError as exc:
            log.warning("zbus data: other processes not asked (%s)", exc)
        finally:
            del self._waiting[ask_id]
        return list(waiting.answers)

    def _asked(self, data: bytes) -> None:
        try:
            ask = _ASK.decode(data)
        except (msgspec.DecodeError, ValueError):
            log.warning("zbus census: unreadable ask dropped")
            return
        if ask.reply_to == self.mailboxes.owner:
            return  # its own: it counts its consumers itself
        answer = _ENCODER.encode(Answer(ask.id, local_shares(self.ctx, ask.codes)))
        self.ctx.spawn(self._send(ask.reply_to, answer), "zbus-census-answer")

    async def _send(self, owner: str, answer: bytes) -> None:
        try:
            await self.mailboxes.send(owner, answer)
        except EngineError as exc:
            log.warning("zbus census: answer not sent (%s)", exc)

    def _answered(self, data: bytes) -> None:
        try:
            answer = _ANSWER.decode(data)
        except (msgspec.DecodeError, ValueError):
            log.warning("zbus census: unreadable answer dropped")
            return
        waiting = self._waiting.get(answer.id)
        if waiting is not None:  # else too late: that data was answered without it
            waiting.answers.append(answer.shares)
            waiting.check()
