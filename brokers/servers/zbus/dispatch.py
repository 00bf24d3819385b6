"""Stamping and routing one inbound message (zbus.md §4, §5, §12).

Before routing, ``remote-addr``, ``broker`` and (when absent) ``mq_reply`` are stamped.
Runs of produces to a catalog MQ, consumes of a queue MQ and requests on a registered
reply queue are handled without a task (:func:`start_all`).
A handler answers by itself or raises :class:`Refuse`; errors of produce, consume and
request are not sent when ``ack`` is off. An engine failure answers 500 with a short text:
the message was not accepted.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from brokers.engine import (
    AccessDenied,
    EngineError,
    InvalidMessage,
    MessageTooLarge,
    QueueFull,
    RateLimited,
    TopicNotFound,
)
from brokers.protocols.zbus import Command, Header, Message
from brokers.protocols.zbus.replies import (
    MESSAGE_TOO_LARGE,
    bad_format,
    command_not_supported,
    mq_forbidden,
    mq_not_found,
    mq_rate_limited,
)
from brokers.servers.protocol_errors import protocol_errors
from brokers.servers.zbus.admin import admin
from brokers.servers.zbus.batch import MAX_BATCH
from brokers.servers.zbus.connection import Connection
from brokers.servers.zbus.consume import consume, consume_now
from brokers.servers.zbus.context import ServerContext
from brokers.servers.zbus.produce import produce, produce_now
from brokers.servers.zbus.replies import Refuse, reply
from brokers.servers.zbus.request import request, request_now
from brokers.servers.zbus.stamp import stamp
from brokers.servers.zbus.track import track_sub

log = logging.getLogger("mqcloud.zbus")

Handler = Callable[[ServerContext, Connection, Message], Awaitable[None]]


async def heartbeat(ctx: ServerContext, conn: Connection, msg: Message) -> None:
    """Never answered (§11.1)."""


HANDLERS: dict[str, Handler] = {
    Command.PRODUCE: produce,
    Command.CONSUME: consume,
    Command.REQUEST: request,
    Command.HEARTBEAT: heartbeat,
    Command.ADMIN: admin,
    Command.TRACK_SUB: track_sub,
}


async def dispatch(ctx: ServerContext, conn: Connection, msg: Message) -> None:
    """Run the handler of ``msg``'s command and answer its errors."""
    msg = stamp(ctx, conn, msg)
    command = msg.command
    handler = HANDLERS.get(command)
    if handler is None:
        reply(conn, msg, 400, command_not_supported(command))
        return
    try:
        await handler(ctx, conn, msg)
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        answer_error(conn, msg, exc)


Started = tuple[asyncio.Future[Any] | Coroutine[Any, Any, None], int, int]
"""What the connection tracks for one request or run: a future (handled without a task)
or a coroutine (to run as a task), its bytes and its number of requests."""


def start_all(ctx: ServerContext, conn: Connection, messages: list[Message]) -> list[Started]:
    """Start what ``messages`` (decoded together, in order) ask for. Runs of produces
    to one MQ with one token are handled together without a task where they can be
    (:func:`~.produce.produce_now`), a consume of a queue MQ at once where it can be
    (:func:`~.consume.consume_now`), a request whose reply queue is registered at once
    (:func:`~.request.request_now`); every other message runs :func:`dispatch`."""
    started: list[Started] = []
    i, n = 0, len(messages)
    while i < n:
        msg = messages[i]
        headers = msg.headers
        command = headers.get(Header.CMD)
        if command == Command.REQUEST:
            done = request_now(ctx, conn, msg, answer_error)
            if done is None:
                started.append((dispatch(ctx, conn, msg), _size(msg), 1))
            else:
                started.append((done, _size(msg), 1))
            i += 1
            continue
        if command != Command.PRODUCE:
            # a consume that cannot be done at once (it releases first) leaves the
            # connection's in-flight messages in place, so the consumes behind it
            # cannot either: they keep their order (a later one replaces an earlier)
            if command != Command.CONSUME or not consume_now(ctx, conn, msg):
                started.append((dispatch(ctx, conn, msg), _size(msg), 1))
            i += 1
            continue
        mq, token = headers.get(Header.MQ), headers.get(Header.TOKEN)
        j = i + 1
        while j < n and j - i < MAX_BATCH:
            other = messages[j].headers
            if (
                other.get(Header.CMD) != Command.PRODUCE
                or other.get(Header.MQ) != mq
                or other.get(Header.TOKEN) != token
            ):
                break
            j += 1
        run = messages[i:j]
        done = produce_now(ctx, conn, run, answer_error)
        if done is None:
            started.extend((dispatch(ctx, conn, m), _size(m), 1) for m in run)
        else:
            started.append((done, sum(_size(m) for m in run), len(run)))
        i = j
    return started


def _size(msg: Message) -> int:
    return len(msg.body) + sum(len(k) + len(v) for k, v in msg.headers.items())


def answer_error(conn: Connection, msg: Message, exc: BaseException) -> None:
    """Answer the error a handler of ``msg`` raised (nothing where ``ack`` is off, except
    admin and format errors): the message was not accepted."""
    command = msg.command
    if isinstance(exc, Refuse):
        if exc.always or msg.ack:
            reply(conn, msg, exc.status, exc.body)
    elif isinstance(exc, MessageTooLarge | InvalidMessage):
        if msg.ack:
            body = (
                MESSAGE_TOO_LARGE if isinstance(exc, MessageTooLarge) else bad_format(exc.message)
            )
            reply(conn, msg, 400, body)
    elif isinstance(exc, QueueFull):
        if msg.ack:
            reply(conn, msg, 500, exc.message)
    elif isinstance(exc, AccessDenied):  # the engine's gate: the acting app may not (any longer)
        if msg.ack:
            reply(conn, msg, 403, mq_forbidden(msg.mq or "", msg.token))
    elif isinstance(exc, RateLimited):
        if msg.ack:
            reply(conn, msg, 403, mq_rate_limited(msg.mq or "", exc.retry_after_ms))
    elif isinstance(exc, TopicNotFound):
        if msg.ack:
            reply(conn, msg, 404, mq_not_found(msg.mq or ""))
    elif isinstance(exc, EngineError):
        protocol_errors.record(
            log, "zbus", "engine_error", "zbus %s from %s: %s", command, conn.remote_addr, exc
        )
        if msg.ack or command == Command.ADMIN:
            reply(conn, msg, 500, "store unavailable")
    else:
        log.error("zbus %s from %s failed", command, conn.remote_addr, exc_info=exc)
        if msg.ack or command == Command.ADMIN:
            reply(conn, msg, 500, "internal error")
