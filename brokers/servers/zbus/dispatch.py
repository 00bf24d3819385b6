"""Stamping and routing one inbound message (zbus.md §4, §5, §12).

Before routing, ``remote-addr``, ``broker`` and (when absent) ``mq_reply`` are stamped.
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
from brokers.servers.zbus.produce import produce
from brokers.servers.zbus.replies import Refuse, reply
from brokers.servers.zbus.request import request
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


def stamp(ctx: ServerContext, conn: Connection, msg: Message) -> Message:
    """Set the §5 headers."""
    updates = {Header.REMOTE_ADDR: conn.remote_addr, Header.BROKER: ctx.address}
    if not msg.mq_reply:
        updates[Header.MQ_REPLY] = conn.session_id
    return msg.with_headers(updates)


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
    except Refuse as exc:
        if exc.always or msg.ack:
            reply(conn, msg, exc.status, exc.body)
    except (MessageTooLarge, InvalidMessage) as exc:
        if msg.ack:
            body = (
                MESSAGE_TOO_LARGE if isinstance(exc, MessageTooLarge) else bad_format(exc.message)
            )
            reply(conn, msg, 400, body)
    except QueueFull as exc:
        if msg.ack:
            reply(conn, msg, 500, exc.message)
    except AccessDenied:  # the engine's gate: the acting app may not (any longer)
        if msg.ack:
            reply(conn, msg, 403, mq_forbidden(msg.mq or "", msg.token))
    except RateLimited as exc:
        if msg.ack:
            reply(conn, msg, 403, mq_rate_limited(msg.mq or "", exc.retry_after_ms))
    except TopicNotFound:
        if msg.ack:
            reply(conn, msg, 404, mq_not_found(msg.mq or ""))
    except EngineError as exc:
        protocol_errors.record(
            log, "zbus", "engine_error", "zbus %s from %s: %s", command, conn.remote_addr, exc
        )
        if msg.ack or command == Command.ADMIN:
            reply(conn, msg, 500, "store unavailable")
    except asyncio.CancelledError:
        raise
    except Exception:
        log.exception("zbus %s from %s failed", command, conn.remote_addr)
        if msg.ack or command == Command.ADMIN:
            reply(conn, msg, 500, "internal error")
