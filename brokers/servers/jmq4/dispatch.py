"""Request dispatch: command type → handler, and every failure → a BooleanAck (spec §2.2).

A handler returns the reply frame or raises :class:`Reject` for an early rejection. Engine
errors that escape a handler become a BooleanAck with their §7 code; anything unexpected
becomes status 4 and is logged. One-way requests are executed but never answered.

A request whose header sendTime is older than the request timeout is neither executed nor
answered by its handler: it gets a BooleanAck with code 22 (request timeout), and a one-way
one is dropped. Its client gave up on it; a broker resumed from a pause (SIGSTOP, a frozen
VM) finds such requests waiting in its sockets and must not act on them (issue 20 item 9).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from brokers.engine import EngineError
from brokers.protocols.jmq4 import Code, EncodeError, Frame, Header, boolean_ack
from brokers.servers.jmq4 import assignment, cluster, connection, consume, produce, transaction
from brokers.servers.jmq4.context import ServerContext
from brokers.servers.jmq4.errors import Reject, engine_code
from brokers.servers.jmq4.session import Session
from brokers.servers.protocol_errors import protocol_errors

log = logging.getLogger("mqcloud.jmq4")

Handler = Callable[[ServerContext, Session, Header, Any], Awaitable[Frame]]

HANDLERS: Mapping[int, Handler] = {
    **connection.HANDLERS,
    **cluster.HANDLERS,
    **assignment.HANDLERS,
    **produce.HANDLERS,
    **consume.HANDLERS,
    **transaction.HANDLERS,
}


async def dispatch(ctx: ServerContext, session: Session, frame: Frame) -> bytes | None:
    """Run the handler for a request frame; the encoded reply, or None for one-way requests."""
    header = frame.header
    handler = HANDLERS.get(header.type)
    if handler is None:  # a response sent to us, or a type without a handler
        return None
    if session.send_times.stale(header.send_time, ctx.config.request_timeout_ms):
        protocol_errors.record(
            log,
            "jmq4",
            "expired",
            "JMQ4 %s from %s refused: sent at %s, later than the connection's other requests"
            " by more than the request timeout (%s ms)",
            header.type,
            session.address,
            header.send_time,
            ctx.config.request_timeout_ms,
        )
        if header.one_way:
            return None
        return boolean_ack(header, Code.CN_REQUEST_TIMEOUT, "request timeout").encode()
    try:
        reply = await handler(ctx, session, header, frame.payload)
    except Reject as exc:
        reply = boolean_ack(header, exc.code, exc.text)
    except EngineError as exc:
        reply = boolean_ack(header, engine_code(exc), exc.message)
    except asyncio.CancelledError:
        raise
    except Exception:
        log.exception("JMQ4 %s from %s failed", header.type, session.address)
        reply = boolean_ack(header, Code.CN_UNKNOWN_ERROR, "unknown error")
    if header.one_way:
        return None
    try:
        return reply.encode()
    except EncodeError:
        log.exception("JMQ4 reply to %s could not be encoded", header.type)
        return boolean_ack(header, Code.CN_UNKNOWN_ERROR, "unknown error").encode()
