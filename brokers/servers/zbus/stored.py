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
    AliasFamily,
    Header,
    Message,
    RequestLine,
    StatusLine,
    encode_delivery,
    header_line,
    parse_status,
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


def to_engine(
    message: Message, *, priority: int = 0, headers: dict[str, str] | None = None
) -> EngineMessage:
    """The engine message storing ``message``: its headers as the properties — or
    ``headers`` in their place, a dict the caller built for it and hands over (not
    copied again)."""
    properties = dict(message.headers) if headers is None else headers
    if message.status:
        properties[STATUS] = str(message.status)
    return EngineMessage(message.body, attributes=properties, priority=priority, extension=MARK)


def _headers(stored: StoredMessage | MessageView) -> tuple[dict[str, str], int]:
    """The zbus headers a record's properties make, and its response status (0 if none)."""
    headers: dict[str, str] = {}
    status = 0
    for key, value in stored.attributes.items():
        if key == STATUS:
            status = parse_status(value) or 0
        elif not key.startswith(":"):
            # other pseudo-properties are not headers; a property no header line can
            # carry (a line break in a JMQ4 attribute value) is left out, not the message
            low = key.lower()
            if header_line(low, value) is not None:
                headers[low] = value
    if Header.MSGID not in headers:
        other = stored.attributes.get(MESSAGE_ID) or stored.business_id
        if other and writable_header(Header.MSGID, other):
            headers[Header.MSGID] = other
    return headers, status


def from_stored(stored: StoredMessage | MessageView) -> Message:
    """The zbus message a record carries."""
    headers, status = _headers(stored)
    start = StatusLine(status, reason_phrase(status)) if status else RequestLine()
    return Message(start=start, headers=headers, body=stored.body)


def from_record(record: bytes) -> Message:
    """The zbus message of an engine record (read with :func:`message_view`: only the
    fields a zbus message shows)."""
    return from_stored(message_view(record))


def delivery_bytes(
    record: bytes,
    *,
    msgid: str | None,
    status: int | None = None,
    redelivered: bool = False,
    aliases: AliasFamily = AliasFamily.NONE,
) -> bytes:
    """The wire bytes of an engine record delivered to a consumer: what
    ``encode_message(make_delivery(from_record(record), …), aliases=…)`` writes, without
    the intermediate messages (it runs per delivered message). Raises
    :class:`~brokers.protocols.zbus.EncodeError` as that would."""
    view = message_view(record)
    headers, own_status = _headers(view)
    return encode_delivery(
        headers,
        view.body,
        msgid=msgid,
        status=status,
        own_status=own_status,
        redelivered=redelivered,
        aliases=aliases,
    )
