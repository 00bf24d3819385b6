"""zbus messages ↔ engine records, through the record's one properties map.

The zbus body is the record body and every header is a property (what JMQ4 clients see
as attributes, VibeMQ clients as headers, HTTP-MQ clients as ``properties``); a
response-shaped message's status travels as the property ``:status`` (no header can be
named so). A record written by another protocol comes back with its properties as the
headers (names lower-cased, as zbus reads them), its VibeMQ ``messageId`` or JMQ4
businessId as ``msgid`` when it has no zbus one, so ``msgid_raw`` still names the
producer's id. Properties no header line can carry (a name with ``:``, a line break in
a value) are left out of the zbus view.
"""

from __future__ import annotations

from brokers.engine import Message as EngineMessage
from brokers.engine import MessageView, StoredMessage, message_view
from brokers.protocols.zbus import (
    Header,
    Message,
    RequestLine,
    StatusLine,
    reason_phrase,
    writable_header,
)

STATUS = ":status"
"""The property holding a response-shaped message's status."""
MESSAGE_ID = "messageId"
"""The property other protocols keep their own message id in (VibeMQ)."""
MARK = b"zb1\0"
"""The record extension of messages produced over zbus: the console's message browser
names the producing protocol from it; consumers of every protocol ignore it."""


def to_engine(message: Message, *, priority: int = 0) -> EngineMessage:
    """The engine message storing ``message``: its headers as the properties."""
    properties = dict(message.headers)
    if message.status:
        properties[STATUS] = str(message.status)
    return EngineMessage(message.body, attributes=properties, priority=priority, extension=MARK)


def from_stored(stored: StoredMessage | MessageView) -> Message:
    """The zbus message a record carries."""
    headers: dict[str, str] = {}
    status = 0
    for key, value in stored.attributes.items():
        if key == STATUS:
            status = int(value) if value.isdigit() else 0
        elif not key.startswith(":") and writable_header(key, value):
            # other pseudo-properties are not headers; a property no header line can
            # carry (a line break in a JMQ4 attribute value) is left out, not the message
            headers[key.lower()] = value
    if Header.MSGID not in headers:
        other = stored.attributes.get(MESSAGE_ID) or stored.business_id
        if other:
            headers[Header.MSGID] = other
    start = StatusLine(status, reason_phrase(status)) if status else RequestLine()
    return Message(start=start, headers=headers, body=stored.body)


def from_record(record: bytes) -> Message:
    """The zbus message of an engine record (read with :func:`message_view`: only the
    fields a zbus message shows)."""
    return from_stored(message_view(record))
