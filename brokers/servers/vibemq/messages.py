"""VibeMQ messages ⇄ engine records, through the record's one properties map.

A published message is stored as one engine record whose body is bytes every protocol
reads as they are: a string payload as its UTF-8 text (no JSON quotes), a base64 one
(``"encoding": "base64"`` beside it) as the bytes it holds, any other JSON
value as its JSON text with the pseudo-property ``:content-type: application/json``
(``null`` too, so it stays apart from the empty string). The publisher's headers are the properties, with the message id as ``messageId`` (ids may be
longer than a JMQ4 businessId; a header named ``:x`` is stored as ``::x``, not as a
pseudo-property: :func:`~brokers.engine.client_property`), and the priority is the record's.

Delivered back, a record written by any protocol becomes a JSON payload: the JSON value
for ``application/json``, else the body as a JSON string when it is UTF-8, else its base64
with the frame's top-level field ``"encoding": "base64"`` (never replaced by U+FFFD; the
publisher's headers, an ``encoding`` of its own among them, go untouched). The id is ``messageId``,
else zbus's ``msgid``, else the businessId, else the index.
"""

from __future__ import annotations

import base64
from typing import Literal

import msgspec

from brokers.engine import (
    Delivery,
    Message,
    RecordParts,
    attribute_lines,
    client_name,
    client_property,
    message_view,
    read_attribute_line,
    record_parts,
    split_attribute_text,
)
from brokers.protocols.vibemq import BASE64, Header, Publish, encode_deliver, encode_deliver_json
from brokers.servers.bounded import keep

ID_PROPERTY = "messageId"
CONTENT_TYPE = ":content-type"
"""A pseudo-property (no header is named so): set on JSON values, so they come back as
JSON; VibeMQ and zbus deliveries leave pseudo-properties out."""
JSON = "application/json"
DELIVERY_ATTEMPTS = Header.DELIVERY_ATTEMPTS
MARK = b"vm1\0"
"""The record extension of messages published over VibeMQ: the console's message browser
names the producing protocol from it; consumers of every protocol ignore it."""


def to_message(frame: Publish) -> Message:
    """The engine message of a ``publish``."""
    payload = frame.payload
    headers = frame.headers
    if any(key[:1] == ":" for key in headers):  # a client's ":x" is not a pseudo-property
        headers = {client_property(key): value for key, value in headers.items()}
    properties = {**headers, ID_PROPERTY: frame.id}
    if payload is None:  # JSON null (or no payload): kept apart from the empty string
        body = b"null"
        properties[CONTENT_TYPE] = JSON
    elif isinstance(payload, str):
        body = payload.encode("utf-8")
    elif isinstance(payload, bytes):  # "encoding": "base64", decoded by the codec
        body = payload
    else:
        raw = bytes(payload) if isinstance(payload, msgspec.Raw) else msgspec.json.encode(payload)
        if raw[:1] == b'"':  # a JSON string: its text
            body = msgspec.json.decode(raw, type=str).encode("utf-8")
        else:
            body = raw
            properties[CONTENT_TYPE] = JSON
    return Message(body, attributes=properties, priority=int(frame.priority), extension=MARK)


_check_json = msgspec.json.Decoder(msgspec.Raw).decode  # validates, builds nothing
_encode = msgspec.json.encode


def _payload_json(body: bytes, content_type: str) -> bytes | Literal[False] | None:
    """The JSON of a body's payload: the body itself when it is JSON of ``application/json``,
    else the JSON string of its text; None for a ``null`` JSON body (no payload, §2); False
    when the body is not UTF-8 (it goes as base64)."""
    if content_type == JSON or content_type.split(";")[0].strip().lower() == JSON:
        if body.strip() == b"null":
            return None  # published without a payload (null reads as absent, §2)
        try:
            _check_json(body)
        except msgspec.DecodeError:
            pass
        else:
            return body
    try:
        return _encode(body.decode("utf-8"))
    except UnicodeDecodeError:
        return False


def deliver_json(
    queue: str, delivery: Delivery, attempt: int | None = None
) -> tuple[str, bytes, int]:
    """The ``deliver`` frame of a record as its JSON text (``encode_json`` of the frame),
    with its ``id`` and the record's store time (ms): the record is read once. ``attempt``
    overrides the engine's count. It runs per message delivered: a record as VibeMQ
    publishers store it is written from its attribute text (:func:`_deliver_from_text`),
    any other from its properties' dict (:func:`_deliver_from_view`)."""
    attempts = attempt if attempt is not None else max(1, delivery.attempts)
    parts = record_parts(delivery.record)
    if parts is not None:
        written = _deliver_from_text(queue, parts, attempts)
        if written is not None:
            return written[0], written[1], parts.store_time_ms
    return _deliver_from_view(queue, delivery, attempts)


def _deliver_from_view(queue: str, delivery: Delivery, attempts: int) -> tuple[str, bytes, int]:
    stored = message_view(delivery.record)
    props = stored.attributes
    headers = {}
    for key, value in props.items() if props else ():
        name = client_name(key)
        if name is not None:
            headers[name] = value
    message_id = headers.pop(ID_PROPERTY, None) or props.get("msgid") or stored.business_id
    message_id = message_id or str(delivery.index)
    payload = _payload_json(stored.body, props.get(CONTENT_TYPE, ""))
    encoding = None
    if payload is False:
        encoding = BASE64
        payload = _encode(base64.b64encode(stored.body).decode("ascii"))
    headers[DELIVERY_ATTEMPTS] = str(attempts)
    raw = None if payload is None else msgspec.Raw(payload)
    frame = encode_deliver(message_id, queue, raw, headers, encoding)
    return message_id, frame, stored.store_time_ms


_Block = tuple[bytes, str] | None
_BLOCKS: dict[tuple[str, str], _Block] = {}
"""(attribute text before a record's ``messageId`` line, after it) → the JSON of the
headers its other properties make, left open for the delivery count (``{"a":"1",``),
and its content type; None for text whose records take the general path. A publisher's
headers recur on every message, its message ids do not."""
_BLOCKS_MAX = 4096
_BLOCK_KEY_MAX = 2048
"""Longer texts are not kept (each would hold this much of the cache)."""
_ATTEMPTS_KEY = _encode(DELIVERY_ATTEMPTS) + b":"


def _deliver_from_text(queue: str, parts: RecordParts, attempts: int) -> tuple[str, bytes] | None:
    """The id and frame of a record whose properties are all written the common way and
    hold a non-empty ``messageId`` once, ``deliveryAttempts`` not at all, and whose body
    is UTF-8; None for any other record (the general path)."""
    try:
        text = parts.attribute_bytes.decode("utf-8")
    except UnicodeDecodeError:
        return None
    split = split_attribute_text(text, ID_PROPERTY)
    if split is None or not split[1]:
        return None
    before, message_id, after = split
    key = (before, after)
    block = _BLOCKS.get(key, False)
    if block is False:
        block = _headers_block(before, after)
        if len(before) + len(after) <= _BLOCK_KEY_MAX:
            keep(_BLOCKS, key, block, _BLOCKS_MAX)
    if block is None:
        return None
    opened, content_type = block
    payload = _payload_json(parts.body, content_type)
    if payload is False:
        return None
    headers = b"".join((opened, _ATTEMPTS_KEY, _encode(str(attempts)), b"}"))
    return message_id, encode_deliver_json(message_id, queue, payload, headers)


def _headers_block(before: str, after: str) -> _Block:
    """The entry of :data:`_BLOCKS` for the text around a ``messageId`` line."""
    headers: dict[str, str] = {}
    content_type = ""
    for line in attribute_lines(before, after):
        read = read_attribute_line(line)
        if read is None:
            return None
        key, value = read
        if key in (ID_PROPERTY, DELIVERY_ATTEMPTS):  # the last id wins; the count is ours
            return None
        name = client_name(key)
        if name is None:  # a pseudo-property
            if key == CONTENT_TYPE:
                content_type = value
            continue
        headers[name] = value
    opened = _encode(headers)[:-1]
    return (opened + b"," if headers else opened), content_type
