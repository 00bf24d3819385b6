"""VibeMQ messages ⇄ engine records, through the record's one properties map.

A published message is stored as one engine record whose body is bytes every protocol
reads as they are: a string payload as its UTF-8 text (no JSON quotes), any other JSON
value as its JSON text with the pseudo-property ``:content-type: application/json``
(``null`` too, so it stays apart from the empty string). The publisher's headers are the properties, with the message id as ``messageId`` (ids may be
longer than a JMQ4 businessId), and the priority is the record's.

Delivered back, a record written by any protocol becomes a JSON payload: the JSON value
for ``application/json``, else the body as a JSON string when it is UTF-8, else its base64
with the header ``encoding: base64`` (never replaced by U+FFFD). The id is ``messageId``,
else zbus's ``msgid``, else the businessId, else the index.
"""

from __future__ import annotations

import base64
from typing import Any

import msgspec

from brokers.engine import Delivery, Message, message_view
from brokers.protocols.vibemq import Header, Publish, encode_deliver

ID_PROPERTY = "messageId"
CONTENT_TYPE = ":content-type"
"""A pseudo-property (no header is named so): set on JSON values, so they come back as
JSON; VibeMQ and zbus deliveries leave pseudo-properties out."""
JSON = "application/json"
ENCODING = "encoding"
DELIVERY_ATTEMPTS = Header.DELIVERY_ATTEMPTS
MARK = b"vm1\0"
"""The record extension of messages published over VibeMQ: the console's message browser
names the producing protocol from it; consumers of every protocol ignore it."""


def to_message(frame: Publish) -> Message:
    """The engine message of a ``publish``."""
    payload = frame.payload
    properties = {**frame.headers, ID_PROPERTY: frame.id}
    if payload is None:  # JSON null (or no payload): kept apart from the empty string
        body = b"null"
        properties[CONTENT_TYPE] = JSON
    elif isinstance(payload, str):
        body = payload.encode("utf-8")
    else:
        raw = bytes(payload) if isinstance(payload, msgspec.Raw) else msgspec.json.encode(payload)
        if raw[:1] == b'"':  # a JSON string: its text
            body = msgspec.json.decode(raw, type=str).encode("utf-8")
        else:
            body = raw
            properties[CONTENT_TYPE] = JSON
    return Message(body, attributes=properties, priority=int(frame.priority), extension=MARK)


_check_json = msgspec.json.Decoder(msgspec.Raw).decode  # validates, builds nothing


def _payload(body: bytes, content_type: str, headers: dict[str, str]) -> Any:
    if content_type == JSON or content_type.split(";")[0].strip().lower() == JSON:
        if body.strip() == b"null":
            return None  # published without a payload (null reads as absent, §2)
        try:
            _check_json(body)
        except msgspec.DecodeError:
            pass
        else:
            return msgspec.Raw(body)
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        headers[ENCODING] = "base64"
        return base64.b64encode(body).decode("ascii")


def deliver_json(
    queue: str, delivery: Delivery, attempt: int | None = None
) -> tuple[str, bytes, int]:
    """The ``deliver`` frame of a record as its JSON text (``encode_json`` of the frame),
    with its ``id`` and the record's store time (ms): the record is read once. ``attempt``
    overrides the engine's count. Written out in one pass: it runs per message delivered."""
    stored = message_view(delivery.record)
    props = stored.attributes
    headers = {k: v for k, v in props.items() if k[:1] != ":"} if props else {}
    message_id = headers.pop(ID_PROPERTY, None) or props.get("msgid") or stored.business_id
    message_id = message_id or str(delivery.index)
    payload = _payload(stored.body, props.get(CONTENT_TYPE, ""), headers)
    headers[DELIVERY_ATTEMPTS] = str(attempt if attempt is not None else max(1, delivery.attempts))
    return message_id, encode_deliver(message_id, queue, payload, headers), stored.store_time_ms
