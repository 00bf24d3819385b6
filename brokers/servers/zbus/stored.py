"""zbus messages ↔ engine records.

The zbus body is the record body; the headers and the start line's status travel in the
record's ``extension`` as msgpack behind a magic prefix (headers may be larger than the
32 KiB a record's attribute block allows, and msgpack is cheap). A record written by another
protocol has no such extension: its attributes become the headers, so a JMQ4 or VibeMQ
message can be consumed over zbus too.

The producer's ``msgid`` is also stored as the record's ``msgid`` property (attribute), so
the message browser and ``pipeline trace`` find a zbus message by the id its client saw,
as they find a VibeMQ one by ``vibemq.id`` (until the engine keeps every header as a
property, issue 17). An id longer than :data:`MAX_ID_PROPERTY` characters stays in the
headers only.
"""

from __future__ import annotations

import msgspec

from brokers.engine import Message as EngineMessage
from brokers.engine import StoredMessage, decode_record
from brokers.protocols.zbus import Message, RequestLine, StatusLine, reason_phrase

MAGIC = b"zb1\0"
_ENCODER = msgspec.msgpack.Encoder()
_DECODER = msgspec.msgpack.Decoder(tuple[int, dict[str, str]])
ID_PROPERTY = "msgid"
MAX_ID_PROPERTY = 255


def to_engine(message: Message, *, priority: int = 0) -> EngineMessage:
    """The engine message storing ``message`` (status 0 means request-shaped)."""
    status = message.status or 0
    extension = MAGIC + _ENCODER.encode((status, dict(message.headers)))
    msgid = message.msgid
    attributes = {ID_PROPERTY: msgid} if msgid and len(msgid) <= MAX_ID_PROPERTY else None
    return EngineMessage(
        message.body, extension=extension, priority=priority, attributes=attributes
    )


def from_stored(stored: StoredMessage) -> Message:
    """The zbus message a record carries."""
    ext = stored.extension
    if ext.startswith(MAGIC):
        try:
            status, headers = _DECODER.decode(ext[len(MAGIC) :])
        except msgspec.DecodeError:
            status, headers = 0, {}
    else:
        status = 0
        headers = {str(k).lower(): str(v) for k, v in stored.attributes.items()}
    start = StatusLine(status, reason_phrase(status)) if status else RequestLine()
    return Message(start=start, headers=headers, body=stored.body)


def from_record(record: bytes) -> Message:
    """The zbus message of an engine record."""
    return from_stored(decode_record(record))
