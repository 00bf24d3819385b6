"""VibeMQ messages ⇄ engine records.

A published message is stored as one engine record: the payload's JSON bytes as the body
(verbatim, so it is delivered exactly as published), the publisher's headers as the
attributes plus ``vibemq.id`` holding the message id (ids may be longer than a JMQ4
businessId), and the priority. Records written by other protocols are delivered too: a
body that is not JSON becomes a JSON string, and the id falls back to the businessId or
the index.
"""

from __future__ import annotations

from typing import Any

import msgspec

from brokers.engine import Delivery, Message
from brokers.protocols.vibemq import Deliver, Publish, deliver

ID_ATTRIBUTE = "vibemq.id"


def to_message(frame: Publish) -> Message:
    """The engine message of a ``publish``."""
    payload = frame.payload
    if isinstance(payload, msgspec.Raw):
        body = bytes(payload)
    elif payload is None:
        body = b""
    else:
        body = msgspec.json.encode(payload)
    return Message(
        body,
        attributes={**frame.headers, ID_ATTRIBUTE: frame.id},
        priority=int(frame.priority),
    )


def _payload(body: bytes, native: bool) -> Any:
    if not body:
        return None
    if native:
        return msgspec.Raw(body)
    try:
        msgspec.json.decode(body)
    except msgspec.DecodeError:
        return body.decode("utf-8", errors="replace")
    return msgspec.Raw(body)


def message_id(delivery: Delivery) -> str:
    """The VibeMQ id of a delivered record."""
    stored = delivery.message
    return stored.attributes.get(ID_ATTRIBUTE) or stored.business_id or str(delivery.index)


def to_deliver(queue: str, delivery: Delivery, attempt: int | None = None) -> Deliver:
    """The ``deliver`` frame of a record; ``attempt`` overrides the engine's count."""
    stored = delivery.message
    headers = dict(stored.attributes)
    native = headers.pop(ID_ATTRIBUTE, None) is not None
    return deliver(
        message_id(delivery),
        queue,
        _payload(stored.body, native),
        headers,
        attempt=attempt if attempt is not None else max(1, delivery.attempts),
    )
