"""The frames a broker sends in answer to client frames, shaped exactly as vibemq.md shows them.

Ids are echoed (§4); an error without a request id gets a fresh one.
"""

from __future__ import annotations

import uuid
from typing import Any

from brokers.protocols.vibemq.enums import SERVER_SHUTDOWN, ErrorCode, Header
from brokers.protocols.vibemq.errors import ProtocolError
from brokers.protocols.vibemq.frames import (
    Connect,
    ConnectAck,
    Deliver,
    Disconnect,
    Error,
    Ping,
    Pong,
    Publish,
    PublishAck,
    Subscribe,
    SubscribeAck,
    Unsubscribe,
    UnsubscribeAck,
)


def fresh_id() -> str:
    """A new frame id for server-initiated frames and errors not tied to a client frame."""
    return uuid.uuid4().hex


def connect_ack(request: Connect, *, server_version: str, connection_id: str) -> ConnectAck:
    """§5: same id, ``serverVersion`` and ``connectionId`` headers."""
    return ConnectAck(
        id=request.id,
        headers={Header.SERVER_VERSION: server_version, Header.CONNECTION_ID: connection_id},
    )


def pong(request: Ping) -> Pong:
    """§5: same id."""
    return Pong(id=request.id)


def publish_ack(
    request: Publish, *, dropped: bool = False, dead_lettered: bool = False
) -> PublishAck:
    """§6: top-level ``queue`` plus ``messageId`` / ``queueName`` headers; overflow flags."""
    headers = {Header.MESSAGE_ID: request.id, Header.QUEUE_NAME: request.queue}
    if dropped:
        headers[Header.DROPPED] = "true"
    if dead_lettered:
        headers[Header.DEAD_LETTERED] = "true"
    return PublishAck(id=request.id, queue=request.queue, headers=headers)


def subscribe_ack(request: Subscribe) -> SubscribeAck:
    """§7: ``queueName`` and ``subscriptionId`` (the subscribe's id) headers."""
    return SubscribeAck(
        id=request.id,
        queue=request.queue,
        headers={Header.QUEUE_NAME: request.queue, Header.SUBSCRIPTION_ID: request.id},
    )


def unsubscribe_ack(request: Unsubscribe) -> UnsubscribeAck:
    """§7: ``queueName`` header."""
    return UnsubscribeAck(
        id=request.id, queue=request.queue, headers={Header.QUEUE_NAME: request.queue}
    )


def deliver(
    message_id: str, queue: str, payload: Any, headers: dict[str, str], *, attempt: int
) -> Deliver:
    """§7: the publisher's headers plus ``deliveryAttempts`` (1 on the first delivery)."""
    return Deliver(
        id=message_id,
        queue=queue,
        payload=payload,
        headers={**headers, Header.DELIVERY_ATTEMPTS: str(attempt)},
    )


def error_frame(code: ErrorCode, message: str, *, request_id: str | None = None) -> Error:
    """§4: an ``error`` echoing ``request_id``, or with a fresh id when there is none."""
    return Error(id=request_id or fresh_id(), error_code=code, error_message=message)


def error_for(error: ProtocolError) -> Error | None:
    """The error frame to send for a decode error, or ``None`` when §1 says close silently."""
    if error.error_code is None:
        return None
    return error_frame(error.error_code, str(error), request_id=error.request_id)


def shutdown_notice() -> Disconnect:
    """§5: ``{"type": "disconnect", "headers": {"reason": "server_shutdown"}}``, no id."""
    return Disconnect(headers={Header.REASON: SERVER_SHUTDOWN})
