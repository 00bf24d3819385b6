"""Stamping and routing one inbound message (zbus.md §4, §5, §12).

Before routing, ``remote-addr``, ``broker`` and (when absent) ``mq_reply`` are stamped.
The common produce is handled without a task (:func:`dispatch_now`).
A handler answers by itself or raises :class:`Refuse`; errors of produce, consume and
request are not sent when ``ack`` is off. An engine failure answers 500 with a short text:
the message was not accepted.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

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
from brokers.servers.zbus.connection import Connection
from brokers.servers.zbus.consume import consume
from brokers.servers.zbus.context import ServerContext
from brokers.servers.zbus.produce import produce, produce_now
from brokers.servers.zbus.replies import Refuse, reply
from brokers.servers.zbus.request import request
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


def dispatch_now(ctx: ServerContext, conn: Connection, msg: Message) -> asyncio.Future[None] | None:
    """Handle ``msg`` without a task where it is the common case — a produce to a catalog
    MQ, see :func:`~.produce.produce_now` — and return the future that is done once it is
    answered; None when ``msg`` needs :func:`dispatch`."""
    if msg.headers.get(Header.CMD) != Command.PRODUCE:
        return None
    return produce_now(ctx, conn, msg, answer_error)


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
