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
from brokers.engine import (
    MessageView,
    StoredMessage,
    attribute_lines,
    message_view,
    read_attribute_line,
    record_parts,
    split_attribute_text,
)
from brokers.protocols.zbus import (
    ALIASED,
    SET_BY_DELIVERY,
    AliasFamily,
    Header,
    Message,
    RequestLine,
    StatusLine,
    alias_lines,
    encode_delivery,
    encode_delivery_blocks,
    header_line,
    parse_status,
    reason_phrase,
    writable_header,
)
from brokers.protocols.zbus.head import CONTROL
from brokers.servers.bounded import keep

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


def topic_of(record: bytes) -> str | None:
    """``from_record(record).topic`` without building the message (a pub/sub MQ matches
    each message against each subscriber's topics)."""
    return _headers(message_view(record))[0].get(Header.TOPIC)


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
    :class:`~brokers.protocols.zbus.EncodeError` as that would.

    A record as zbus producers store it is framed from its attribute text
    (:func:`_header_block`); any other through the headers' dict (:func:`_headers`)."""
    parts = record_parts(record)
    if parts is not None:
        block = _header_block(parts.attribute_bytes, aliases)
        if block is not None:
            before, after, stored_msgid = block
            return encode_delivery_blocks(
                before,
                after,
                stored_msgid,
                parts.body,
                msgid=msgid,
                status=status,
                redelivered=redelivered,
                aliases=aliases,
            )
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


_Wire = dict[str, tuple[str, bytes] | None]
_WIRE: dict[AliasFamily, _Wire] = {}
"""Alias family → attribute line → (header name, its written lines), or ``("", b"")``
for a property that makes no header; None for one that sends the record to the general
path. A producer's properties recur on every message (a value seen once only costs the
miss)."""
_WIRE_PLAIN: _Wire = _WIRE.setdefault(AliasFamily.NONE, {})
"""The family most clients have (an enum member hashes in Python: once per message)."""
_WIRE_MAX = 8192
_OWN_HEADERS = frozenset((Header.REPLY_CODE, Header.MSGID_RAW, Header.REDELIVERED, Header.MSGID))


_Block = tuple[bytes, bytes] | None
_BLOCKS: dict[AliasFamily, dict[tuple[str, str], _Block]] = {}
"""Alias family → (attribute text before a record's ``msgid`` line, after it) → the
written header lines before and after the msgid, or None (the general path)."""
_BLOCKS_PLAIN = _BLOCKS.setdefault(AliasFamily.NONE, {})
_BLOCKS_MAX = 4096
_BLOCK_KEY_MAX = 2048
"""Longer attribute texts are not kept (each would hold this much of the cache)."""


def _header_block(attribute_bytes: bytes, aliases: AliasFamily) -> tuple[bytes, bytes, str] | None:
    """The written header lines that stand before and after a record's stored ``msgid``,
    and that msgid; None when the record takes the general path: properties not all
    written the common way or not UTF-8, no ``msgid`` (its id comes from ``messageId``
    or the businessId), a ``:status``, ``reply_code``, ``msgid_raw`` or ``redelivered``
    property, two properties that make one header. A producer's other properties (its
    MQ, address, session) recur on every message, its msgid does not: the two blocks come
    from a cache keyed by the text around the msgid line (written line by line on a
    miss, :func:`_written_lines`)."""
    try:
        text = attribute_bytes.decode("utf-8")
    except UnicodeDecodeError:
        return None
    split = split_attribute_text(text, Header.MSGID)
    if split is None:
        return None
    before, stored_msgid, after = split
    if CONTROL.search(stored_msgid):
        return None
    cache = _BLOCKS_PLAIN if aliases is AliasFamily.NONE else _BLOCKS.setdefault(aliases, {})
    key = (before, after)
    block = cache.get(key, False)
    if block is False:
        names: set[str] = set()  # across both blocks: two properties making one header
        written_before = _written_lines(attribute_lines(before, ""), aliases, names)
        written_after = _written_lines(attribute_lines("", after), aliases, names)
        block = (
            None
            if written_before is None or written_after is None
            else (written_before, written_after)
        )
        if len(before) + len(after) <= _BLOCK_KEY_MAX:
            keep(cache, key, block, _BLOCKS_MAX)
    if block is None:
        return None
    return block[0], block[1], stored_msgid


def _written_lines(lines: list[str], aliases: AliasFamily, names: set[str]) -> bytes | None:
    """The header lines attribute ``lines`` make (none of them a record's first
    ``msgid``), each from :data:`_WIRE`; None when one sends the record to the general
    path or makes a header of one of ``names`` (those written are added to it)."""
    cache = _WIRE_PLAIN if aliases is AliasFamily.NONE else _WIRE.setdefault(aliases, {})
    out: list[bytes] = []
    for line in lines:
        written = cache.get(line, False)
        if written is False:
            written = _wire_line(line, aliases)
            if len(line) <= 128:
                keep(cache, line, written, _WIRE_MAX)
        if written is None:
            return None
        name, wire = written
        if not name:
            continue
        if name in names:
            return None
        names.add(name)
        out.append(wire)
    return b"".join(out)


def _wire_line(line: str, aliases: AliasFamily) -> tuple[str, bytes] | None:
    """One attribute line's entry of :data:`_WIRE` (a second ``msgid`` is one of
    :data:`_OWN_HEADERS`: the general path)."""
    read = read_attribute_line(line)
    if read is None:
        return None
    key, value = read
    if key.startswith(":"):
        return None if key == STATUS else ("", b"")
    name = key.lower()
    if name in _OWN_HEADERS:
        return None
    if name in SET_BY_DELIVERY:  # token, content-length: a delivery writes none
        return ("", b"")
    wire = header_line(name, value)
    if wire is None:
        return ("", b"")
    if name in ALIASED:
        wire = b"".join((wire, *alias_lines(name, value, aliases)))
    return name, wire
