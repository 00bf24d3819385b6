"""The stored message record: byte-compatible with the JMQ4 BrokerMessage layout.

Layout (big-endian; JMQ4 spec §3)::

    0 size INT | 4 partition SHORT | 6 index LONG | 14 term INT | 18 magic SHORT 0x1234
    20 sysCode SHORT | 22 priority BYTE | 23 clientIp 16 bytes | 39 sendTime LONG
    47 storeTime INT (store - send, ms) | 51 bodyCRC LONG | 59 flag SHORT
    61 body BYTES4 | businessId S1 | attributes S2 (Java properties) | extension BYTES4 | app S1

A batch message (sysCode bit 12) carries ``flag`` items and takes ``flag`` consecutive
indexes. The engine stores one record per message (or batch) and patches partition,
index and storeTime on store, so a JMQ4 fetch copies the stored bytes unchanged.

Properties beyond the attributes field (an S2 string: at most 32,767 bytes; zbus allows a
64 KiB header block, VibeMQ 50 headers of 4,096 characters) keep the record a valid JMQ4
message: the whole lines that fit stay in ``attributes``, the rest goes into the extension
behind :data:`PROPERTIES_TAG` (at its start, or after a front-end's 4-byte mark). Every
reader here (:func:`decode_record`, :func:`record_parts`, :func:`message_view`) joins the
two, so only a JMQ4 consumer, which copies records as stored, sees the split.
"""

from __future__ import annotations

import functools
import ipaddress
import re
import struct
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from brokers.engine.errors import InvalidMessage, MessageTooLarge

MAGIC = 0x1234
STORE_TERM = 0
"""The term the store writes into every record (jmq4.md §3: "written by the store"): the
engine has no leader elections with terms, so every record of every protocol has 0."""
FIXED_SIZE = 73
HEADER = struct.Struct(">ihqihhb16sqiqh")  # up to and including flag: 61 bytes
SYS_COMPRESSED = 0x0001
SYS_SHORT_ADDRESS = 0x0080
SYS_BATCH = 0x1000
SYS_DEFAULT = 0x010C  # message version 1, source JOYQUEUE
MAX_BUSINESS_ID = 100
DEFAULT_MAX_BODY = 16 * 1024 * 1024
"""The engine's body limit: the largest any protocol allows (zbus §1: 16 MiB); each
front-end keeps its own below it (JMQ4 3 MiB, HTTP-MQ 4 MiB, VibeMQ's 1 MiB frames)."""
ATTRIBUTES_MAX = 32767
"""The attributes field's limit (JMQ4 S2); properties past it go into the extension."""
MAX_PROPERTIES = 4 * 1024 * 1024
"""The most properties text a record carries."""
PROPERTIES_TAG = b"\0mqcloud:properties\0"
"""Starts the properties text a record's extension carries past :data:`ATTRIBUTES_MAX`."""
MARK_SIZE = 4
"""A front-end's mark at the start of the extension (``zb1\\0``, ``vm1\\0``, ``hm1\\0``)."""
OFF_PARTITION, OFF_INDEX, OFF_STORE_TIME = 4, 6, 47
OFF_PRIORITY = 22
_I16, _I32, _I64 = struct.Struct(">h"), struct.Struct(">i"), struct.Struct(">q")
_ITEM_HEAD = struct.Struct(">ibh")
INT32_MAX, INT32_MIN = 2**31 - 1, -(2**31)


# ---------------------------------------------------------------- attributes (properties)


# Texts needing no escape (the common case, kept off the per-character path): printable
# ASCII without the separators (\\ = : # !); a value may hold spaces, but not a leading one.
_PLAIN_CHARS = r"\x22\x24-\x39\x3b\x3c\x3e-\x5b\x5d-\x7e"
_PLAIN_KEY = re.compile(f"[{_PLAIN_CHARS}]*")
_PLAIN_VALUE = re.compile(f"(?:[{_PLAIN_CHARS}][ {_PLAIN_CHARS}]*)?")
# Printable ASCII needs only its separators, backslashes and (in a key, or leading a
# value) spaces escaped: one str.translate instead of the per-character path below.
_PRINTABLE = re.compile(r"[\x20-\x7e]*")
_VALUE_ESCAPES = str.maketrans({c: "\\" + c for c in "\\=:#!"})
_KEY_ESCAPES = str.maketrans({**{c: "\\" + c for c in "\\=:#!"}, " ": "\\ "})


def _escape(text: str, *, key: bool) -> str:
    if (_PLAIN_KEY if key else _PLAIN_VALUE).fullmatch(text):
        return text
    if _PRINTABLE.fullmatch(text):
        if key:
            return text.translate(_KEY_ESCAPES)
        escaped = text.translate(_VALUE_ESCAPES)
        return "\\" + escaped if escaped[:1] == " " else escaped
    out: list[str] = []
    for pos, ch in enumerate(text):
        code = ord(ch)
        if ch == "\\":
            out.append("\\\\")
        elif ch in "=:#!":
            out.append("\\" + ch)
        elif ch == " ":
            out.append("\\ " if key or pos == 0 else " ")
        elif ch == "\t":
            out.append("\\t")
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\r":
            out.append("\\r")
        elif ch == "\f":
            out.append("\\f")
        elif code < 0x20 or code > 0x7E:
            units = ch.encode("utf-16-be")
            for i in range(0, len(units), 2):
                out.append(f"\\u{int.from_bytes(units[i : i + 2], 'big'):04X}")
        else:
            out.append(ch)
    return "".join(out)


@functools.lru_cache(maxsize=1024)
def _escape_key(key: str) -> str:
    """Keys come from few names (protocol headers): escaped once each."""
    return _escape(key, key=True)


@functools.lru_cache(maxsize=4096)
def _escaped_value(value: str) -> str:
    return _escape(value, key=False)


def _escape_value(value: str) -> str:
    """A value escaped; short ones that need it come from a cache (the same addresses and
    names, ``host\\:port`` say, recur on every message of a connection)."""
    if _PLAIN_VALUE.fullmatch(value):
        return value
    return _escaped_value(value) if len(value) <= 64 else _escape(value, key=False)


_LINES: dict[tuple[str, str], str] = {}
_LINES_MAX = 8192
"""Escaped ``key=value`` lines of short values: a producer's headers recur on every message
(the cache starts over when full; a value seen once only costs the miss)."""


def _line(key: str, value: str) -> str:
    if type(key) is not str or type(value) is not str or len(value) > 64:
        return f"{_escape_key(str(key))}={_escape_value(str(value))}"
    line = _LINES.get((key, value))
    if line is None:
        if len(_LINES) >= _LINES_MAX:
            _LINES.clear()
        line = _LINES[key, value] = f"{_escape_key(key)}={_escape_value(value)}"
    return line


def encode_attributes(attributes: Mapping[str, str] | None) -> bytes:
    """Java-Properties text of ``attributes`` (``key=value`` lines, no trailing newline)."""
    if not attributes:
        return b""
    known = _LINES.get  # the items are the cache's keys: a hit costs no call of _line
    try:
        lines = [known(item) or _line(*item) for item in attributes.items()]
    except TypeError:  # an unhashable value (not a str): written by its str()
        lines = [_line(k, v) for k, v in attributes.items()]
    return "\n".join(lines).encode("ascii")


def _logical_lines(text: str) -> list[str]:
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    result: list[str] = []
    pending: str | None = None
    for raw in lines:
        line = raw.lstrip(" \t\f")
        if pending is None and (not line or line[0] in "#!"):
            continue
        backslashes = len(line) - len(line.rstrip("\\"))
        continued = backslashes % 2 == 1
        if continued:
            line = line[:-1]
        pending = line if pending is None else pending + line
        if not continued:
            result.append(pending)
            pending = None
    if pending is not None:
        result.append(pending)
    return result


# A backslash and what it escapes: \uXXXX (the "u" alone is malformed) or any one character.
_ESCAPE = re.compile(r"\\(u(?:[0-9a-fA-F]{4})?|[\s\S])")
_ESCAPED_CHARS = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _unescape_one(match: re.Match[str]) -> str:
    escaped = match.group(1)
    if escaped[0] == "u":
        if len(escaped) != 5:
            raise InvalidMessage("malformed \\uXXXX in attributes")
        return chr(int(escaped[1:], 16))
    return _ESCAPED_CHARS.get(escaped, escaped)


def _unescape(text: str) -> str:
    if "\\" not in text:  # most keys and values of an escaped block have no escape
        return text
    # one regex pass (a trailing lone backslash stays as it is)
    joined = _ESCAPE.sub(_unescape_one, text)
    if "\\u" not in text:
        return joined
    # join surrogate pairs written as two \u escapes
    return joined.encode("utf-16", "surrogatepass").decode("utf-16", "surrogatepass")


# One physical line of text without backslashes (no escapes, no continuations): the key
# ends at the first separator or blank; blanks and one = or : follow; the rest is the value.
_PLAIN_LINE = re.compile(r"([^=: \t\f]*)[ \t\f]*(?:[=:][ \t\f]*)?(.*)", re.DOTALL)


def _plain_attributes(text: str) -> dict[str, str]:
    """:func:`decode_attributes` of text without backslashes, line by line."""
    result: dict[str, str] = {}
    for raw in text.replace("\r\n", "\n").replace("\r", "\n").split("\n"):
        line = raw.lstrip(" \t\f")
        if not line or line[0] in "#!":
            continue
        m = _PLAIN_LINE.match(line)
        assert m is not None  # the pattern matches every text
        result[m.group(1)] = m.group(2)
    return result


# What the codec writes for ordinary keys and values: ``key=value`` lines, a key of no
# blank, separator or backslash (``\:`` may open it: VibeMQ's ``:content-type``), a value
# that starts with no blank and holds no line break and no backslash but those of ``\:``
# and ``\=`` (zbus stores ``remote-addr=host\:port``).
# The value's loop is unrolled (runs of plain characters, then an escape). No possessive
# quantifiers: CPython 3.11.2's re matched "a=\n" with them.
_SIMPLE_LINE = (
    r"(?:\\:)?[^\s=:\\#!][^\s=:\\]*="
    r"(?:(?:[^\s\\]|\\[:=])[^\n\r\\]*(?:\\[:=][^\n\r\\]*)*)?"
)
_SIMPLE_ONE = re.compile(_SIMPLE_LINE)
_LINES_READ: dict[str, tuple[str, str]] = {}
"""Lines :data:`_SIMPLE_ONE` matched, read: a producer's properties recur on every
message (bounded like :data:`_LINES`)."""


_KEYS_READ: set[str] = set()
"""Keys without a backslash of lines :data:`_SIMPLE_ONE` matched: a line of such a key and a
value without backslash is read without the pattern (bounded like :data:`_LINES`)."""


def _simple_line(line: str) -> tuple[str, str] | None:
    """(key, value) of a line :data:`_SIMPLE_ONE` matches in full, else None.

    A known key with a plain value — what the pattern, given no backslash, asks of a value:
    empty, or no blank first and no carriage return — is read without the pattern and not
    kept: its value varies (a message id), so the line would only crowd the cache."""
    key, sep, value = line.partition("=")
    if (
        sep
        and key in _KEYS_READ
        and "\\" not in value
        and (not value or (not value[0].isspace() and "\r" not in value))
    ):
        return key, value
    if not _SIMPLE_ONE.fullmatch(line):
        return None
    if "\\" not in key:
        if len(_KEYS_READ) >= _LINES_MAX:
            _KEYS_READ.clear()
        _KEYS_READ.add(key)
    if "\\" in value:
        value = value.replace("\\:", ":").replace("\\=", "=")
    read = (":" + key[2:] if key[0] == "\\" else key, value)
    if len(line) <= 128:
        if len(_LINES_READ) >= _LINES_MAX:
            _LINES_READ.clear()
        _LINES_READ[line] = read
    return read


def read_attribute_line(line: str) -> tuple[str, str] | None:
    """(key, value) of one line of attribute text written the common way (a plain
    ``key=value``, see :data:`_SIMPLE_LINE`), from the cache when it recurs; None for any
    other line — text with such a line means what :func:`decode_attributes` makes of it."""
    return _LINES_READ.get(line) or _simple_line(line)


def split_attribute_text(text: str, key: str) -> tuple[str, str, str] | None:
    """``text`` (attribute text) around its first line of property ``key`` (a plain name:
    letters, digits, ``-``, ``_``, ``.``): the text before that line (with its line
    break), the property's value, the text after it (from its line break) — when that
    line is written the common way (:func:`read_attribute_line`); None when there is no
    such line or it is not. A front-end framing deliveries from a record's text keys a
    cache by the two texts: a producer's other properties recur on every message, its
    message id does not. The caller reads the other lines with
    :func:`read_attribute_line` too, and takes its general path where one is not read:
    a line continued into ``key``'s line is such a line, as is ``key`` again further on
    for a caller that must see the last one."""
    line_start = key + "="
    if text.startswith(line_start):
        at = 0
    else:
        at = text.find("\n" + line_start) + 1
        if at == 0:
            return None
    end = text.find("\n", at)
    if end < 0:
        end = len(text)
    value = text[at + len(line_start) : end]
    if "\\" not in value and "\r" not in value and not value[:1].isspace():
        return text[:at], value, text[end:]  # what read_attribute_line reads, without a call
    read = read_attribute_line(text[at:end])
    if read is None or read[0] != key:
        return None
    return text[:at], read[1], text[end:]


def client_property(name: str) -> str:
    """The stored name of a property a client named ``name``. Names starting with ``:``
    are pseudo-properties that front-ends keep for themselves (zbus's ``:status``,
    VibeMQ's ``:content-type``); a client's own ``:trace`` is stored as ``::trace``, so it
    neither passes for one of them (a VibeMQ header ``:content-type`` changed how the
    payload was delivered, a ``:status`` made zbus deliveries responses) nor is lost."""
    return ":" + name if name[:1] == ":" else name


def client_name(stored: str) -> str | None:
    """The name a client gave the property stored as ``stored``
    (:func:`client_property`); None for a pseudo-property."""
    if stored[:1] != ":":
        return stored
    return stored[1:] if stored[1:2] == ":" else None


def attribute_lines(before: str, after: str) -> list[str]:
    """The lines of the two texts :func:`split_attribute_text` returns, in order."""
    lines = before[:-1].split("\n") if before else []
    if after:
        lines += after[1:].split("\n")
    return lines


def decode_attributes(data: bytes, *, strict: bool = False) -> dict[str, str]:
    """Parse Java-Properties text (separators, comments, continuations, escapes).

    The common case — every line a plain ``key=value`` (:data:`_SIMPLE_LINE`) — is read
    line by line, recurring lines from a cache: text made only of such lines means what
    each line says (no continuation, comment, or escape but ``\\:`` and ``\\=``). Any
    other text goes to the parsers below.

    A malformed ``\\uXXXX`` escape raises InvalidMessage when ``strict`` (the produce
    check, :mod:`~brokers.engine.wire`: such text is refused) and otherwise reads as the
    characters written: a record stored before that check, or damaged, still reads, so
    its consumers, retries and dead-letter copy go on instead of failing on it."""
    if not data:
        return {}
    try:
        text = data.decode("latin-1") if not _is_utf8(data) else data.decode("utf-8")
    except UnicodeDecodeError as exc:  # pragma: no cover - latin-1 never fails
        raise InvalidMessage("attributes are not text") from exc
    result: dict[str, str] = {}
    cached = _LINES_READ
    for line in text.split("\n"):
        read = cached.get(line) or _simple_line(line)
        if read is None:
            break
        result[read[0]] = read[1]
    else:
        return result
    if "\\" not in text:
        return _plain_attributes(text)
    if text.count("\\") == text.count("\\:") and _COLON not in text:
        return _colon_escaped_attributes(text)
    try:
        return _full_attributes(text)
    except InvalidMessage:
        if strict:
            raise
        return _full_attributes(_MALFORMED_U.sub(r"\1\\\\u", text))


_MALFORMED_U = re.compile(r"(?<!\\)((?:\\\\)*)\\u(?![0-9a-fA-F]{4})")
"""A ``\\u`` that is not itself escaped and not followed by four hex digits: written
``\\\\u`` (an escaped backslash, then ``u``) by the lenient read."""


_COLON = "\ue000"  # a private-use character standing in for an escaped colon


def _colon_escaped_attributes(text: str) -> dict[str, str]:
    """:func:`decode_attributes` of text whose only escapes are ``\\:`` (VibeMQ's own
    ``:content-type``, a zbus header with a colon): the colons are set aside, the text parsed
    as plain, and put back."""
    result: dict[str, str] = {}
    for key, value in _plain_attributes(text.replace("\\:", _COLON)).items():
        if _COLON in key:
            key = key.replace(_COLON, ":")
        result[key] = value.replace(_COLON, ":") if _COLON in value else value
    return result


# One logical line with escapes: the key runs to the first unescaped separator or blank
# (a backslash escapes the character after it, if any); then blanks and one = or :.
_ESCAPED_LINE = re.compile(r"((?:\\[\s\S]?|[^=: \t\f\\])*)[ \t\f]*(?:[=:][ \t\f]*)?(.*)", re.DOTALL)


def _full_attributes(text: str) -> dict[str, str]:
    """Java-Properties text with escapes and continuations."""
    result: dict[str, str] = {}
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    if "\\\n" in text or text.endswith("\\"):  # maybe a continued line
        lines = _logical_lines(text)
    else:  # every physical line is a logical one (what the codec writes)
        lines = [
            line
            for line in (raw.lstrip(" \t\f") for raw in text.split("\n"))
            if line and line[0] not in "#!"
        ]
    for line in lines:
        m = _ESCAPED_LINE.match(line)
        assert m is not None  # the pattern matches every text
        result[_unescape(m.group(1))] = _unescape(m.group(2))
    return result


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


# ---------------------------------------------------------------- client address


@functools.lru_cache(maxsize=4096)
def encode_client_ip(address: str | None) -> tuple[bytes, bool]:
    """``host[:port]`` (or ``[v6]:port``) -> (16-byte JMQ4 clientIp, is IPv4)."""
    if not address:
        return bytes(16), True
    host, port = address, 0
    if address.startswith("["):
        host, _, rest = address[1:].partition("]")
        port = int(rest[1:]) if rest[:1] == ":" and rest[1:].isascii() and rest[1:].isdigit() else 0
    elif address.count(":") == 1:
        host, _, p = address.partition(":")
        port = int(p) if p.isascii() and p.isdigit() else 0
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return bytes(16), True
    raw = bytes([port & 0xFF, (port >> 8) & 0xFF]) + ip.packed
    return raw[:16].ljust(16, b"\0"), ip.version == 4


def decode_client_ip(raw: bytes, short: bool) -> str:
    """Inverse of :func:`encode_client_ip` (IPv6 addresses come back truncated)."""
    port = raw[0] | (raw[1] << 8)
    if short:
        host = str(ipaddress.IPv4Address(raw[2:6]))
        return f"{host}:{port}"
    return f"[{raw[2:].hex()}]:{port}"


# ---------------------------------------------------------------- messages


@dataclass(slots=True)
class BatchItem:
    """One item of a batch message body (JMQ4 §3.4)."""

    body: bytes
    business_id: str = ""
    attributes: Mapping[str, str] | None = None
    priority: int = 0
    flag: int = 0


def encode_batch_body(items: Sequence[BatchItem]) -> bytes:
    """Concatenate items in the JMQ4 batch body layout."""
    parts: list[bytes] = []
    for item in items:
        bid = _s1(item.business_id, "businessId", limit=MAX_BUSINESS_ID)
        attrs = encode_attributes(item.attributes)
        if len(attrs) > ATTRIBUTES_MAX:
            raise InvalidMessage(f"attributes over {ATTRIBUTES_MAX} bytes")
        size = 4 + 1 + 2 + 4 + len(item.body) + 1 + len(bid) + 2 + len(attrs)
        parts.append(_ITEM_HEAD.pack(size, item.priority, item.flag))
        parts.append(_I32.pack(len(item.body)) + item.body)
        parts.append(bytes([len(bid)]) + bid + _I16.pack(len(attrs)) + attrs)
    return b"".join(parts)


def decode_batch_body(
    body: bytes, count: int | None = None, *, strict: bool = False
) -> list[BatchItem]:
    """Split a (decompressed) batch body into items; strict about sizes, and about the
    items' attribute text when ``strict`` (the produce check: :func:`decode_attributes`)."""
    items: list[BatchItem] = []
    pos, n = 0, len(body)
    try:
        while pos < n:
            size, priority, flag = _ITEM_HEAD.unpack_from(body, pos)
            end = pos + size
            if size < 14 or end > n:
                raise InvalidMessage("batch item size out of range")
            p = pos + 7
            (blen,) = _I32.unpack_from(body, p)
            p += 4
            item_body = body[p : p + blen]
            p += blen
            bl = body[p]
            p += 1
            bid = body[p : p + bl].decode("utf-8")
            p += bl
            (al,) = _I16.unpack_from(body, p)
            p += 2
            attrs = decode_attributes(body[p : p + al], strict=strict)
            p += al
            if blen < 0 or al < 0 or p != end:
                raise InvalidMessage("batch item fields do not add up to its size")
            items.append(BatchItem(item_body, bid, attrs, priority, flag))
            pos = end
    except (struct.error, IndexError, UnicodeDecodeError) as exc:
        raise InvalidMessage("malformed batch body") from exc
    if count is not None and len(items) != count:
        raise InvalidMessage(f"batch has {len(items)} items, flag says {count}")
    return items


@dataclass(slots=True)
class Message:
    """A message to append, as the Python API takes it.

    ``batch_count > 0`` marks ``body`` as a batch body of that many items (see
    :func:`encode_batch_body` / :meth:`Message.batch`); the message then takes
    ``batch_count`` consecutive indexes.
    """

    body: bytes
    business_id: str = ""
    attributes: Mapping[str, str] | None = None
    priority: int = 0
    send_time_ms: int = 0
    flag: int = 0
    sys_code: int | None = None
    extension: bytes = b""
    batch_count: int = 0
    client_address: str | None = None
    body_crc: int | None = None

    @classmethod
    def batch(cls, items: Sequence[BatchItem], **kwargs: object) -> Message:
        """A batch message of ``items`` (n items -> n consecutive indexes)."""
        if not items:
            raise InvalidMessage("empty batch")
        return cls(body=encode_batch_body(items), batch_count=len(items), **kwargs)  # type: ignore[arg-type]


def _s1(text: str | None, what: str, *, limit: int = 127) -> bytes:
    raw = (text or "").encode("utf-8")
    if len(raw) > 127 or len(text or "") > limit:
        raise InvalidMessage(f"{what} longer than {limit} characters")
    return raw


_HEAD_BODY = struct.Struct(">ihqihhb16sqiqhi")  # header + body length: 65 bytes
_BYTE = [bytes([n]) for n in range(256)]


class RecordEncoder:
    """Encodes messages of one append call (same app, client address and store time).

    The parts every record of the call shares are computed once; a plain message (no
    businessId, attributes or extension) costs two struct packs and a join.
    """

    def __init__(
        self,
        *,
        app: str,
        partition: int,
        now_ms: int,
        client_address: str | None = None,
        max_body: int = DEFAULT_MAX_BODY,
    ) -> None:
        self.app_raw = _s1(app, "app")
        self.partition = partition
        self.now_ms = now_ms
        self.client_address = client_address
        self.max_body = max_body
        self.ip, self.short = encode_client_ip(client_address)
        self._app_field = bytes([len(self.app_raw)]) + self.app_raw
        self._plain_tail = b"\0\0\0\0\0\0\0" + self._app_field

    def encode(self, msg: Message) -> tuple[bytes, int]:
        """(record, number of indexes it takes); the index field is left at -1."""
        body = msg.body if isinstance(msg.body, bytes) else bytes(msg.body)
        if len(body) > self.max_body:
            raise MessageTooLarge(f"body of {len(body)} bytes is over {self.max_body}")
        if not -128 <= msg.priority <= 127:
            raise InvalidMessage("priority out of range")
        ip, short = self.ip, self.short
        if msg.client_address and not self.client_address:
            ip, short = encode_client_ip(msg.client_address)
        sys_code = SYS_DEFAULT if msg.sys_code is None else msg.sys_code
        if sys_code >> 13 or sys_code < 0:
            raise InvalidMessage("sysCode bits 13-15 must be clear")
        sys_code = (sys_code | SYS_SHORT_ADDRESS) if short else (sys_code & ~SYS_SHORT_ADDRESS)
        count, flag = 1, msg.flag
        if msg.batch_count:
            if not 0 < msg.batch_count <= 32767:
                raise InvalidMessage("batch count out of range")
            sys_code |= SYS_BATCH
            flag = count = msg.batch_count
        if msg.business_id or msg.attributes or msg.extension:
            bid = (
                _s1(msg.business_id, "businessId", limit=MAX_BUSINESS_ID)
                if msg.business_id
                else b""
            )
            attrs = encode_attributes(msg.attributes)
            ext = msg.extension
            if len(attrs) > ATTRIBUTES_MAX:
                attrs, ext = _split_properties(attrs, ext)
            tail = b"".join(
                (
                    _BYTE[len(bid)],
                    bid,
                    _I16.pack(len(attrs)),
                    attrs,
                    _I32.pack(len(ext)),
                    ext,
                    self._app_field,
                )
            )
        else:
            tail = self._plain_tail
        now = self.now_ms
        send = msg.send_time_ms or now
        crc = zlib.crc32(body) if msg.body_crc is None else msg.body_crc
        head = _HEAD_BODY.pack(
            65 + len(body) + len(tail),
            self.partition,
            -1,
            STORE_TERM,
            MAGIC,
            sys_code,
            msg.priority,
            ip,
            send,
            0 if send == now else _delta(now, send),
            crc,
            flag,
            len(body),
        )
        return b"".join((head, body, tail)), count


def _split_properties(attrs: bytes, extension: bytes) -> tuple[bytes, bytes]:
    """(attributes field, extension) of properties text over the attributes field: the
    whole lines that fit stay, the rest follows :data:`PROPERTIES_TAG` in the extension."""
    if len(attrs) > MAX_PROPERTIES:
        raise InvalidMessage(f"properties over {MAX_PROPERTIES} bytes")
    if len(extension) > MARK_SIZE:
        raise InvalidMessage(f"attributes over {ATTRIBUTES_MAX} bytes beside an extension")
    cut = attrs.rfind(b"\n", 0, ATTRIBUTES_MAX + 1)
    if cut < 0:  # the first line alone is too long: all of it goes to the extension
        return b"", extension + PROPERTIES_TAG + attrs
    return attrs[:cut], extension + PROPERTIES_TAG + attrs[cut + 1 :]


def split_extension(extension: bytes) -> tuple[bytes, bytes]:
    """(the extension as its producer gave it, the properties text it carries past the
    attributes field: empty when none)."""
    if len(extension) > MARK_SIZE:
        tag = len(PROPERTIES_TAG)
        if extension[:tag] == PROPERTIES_TAG:
            return b"", extension[tag:]
        if extension[MARK_SIZE : MARK_SIZE + tag] == PROPERTIES_TAG:
            return extension[:MARK_SIZE], extension[MARK_SIZE + tag :]
    return extension, b""


def _joined(attrs: bytes, more: bytes) -> bytes:
    """Properties text of the attributes field followed by the extension's."""
    return attrs + b"\n" + more if attrs else more


def encode_record(
    msg: Message,
    *,
    app: str,
    partition: int = -1,
    now_ms: int,
    client_address: str | None = None,
    max_body: int = DEFAULT_MAX_BODY,
) -> tuple[bytes, int]:
    """Encode ``msg`` as a stored record; returns (record, number of indexes it takes)."""
    encoder = RecordEncoder(
        app=app,
        partition=partition,
        now_ms=now_ms,
        client_address=client_address,
        max_body=max_body,
    )
    return encoder.encode(msg)


def _delta(now_ms: int, send_ms: int) -> int:
    return max(INT32_MIN, min(INT32_MAX, now_ms - send_ms))


MAX_INFLATED = 64 * 1024 * 1024
_ZIP, _ZLIB = 1, 2  # JMQ4 sysCode compression types both written with java.util.zip


def inflate_body(body: bytes, sys_code: int) -> bytes:
    """The decompressed body of a compressed record (zlib or zip type, at most 64 MiB)."""
    version = (sys_code >> 8) & 0xF
    kind = (sys_code >> 4) & (0x3 if version == 0 else 0x7)
    if kind not in (_ZIP, _ZLIB):
        raise InvalidMessage(f"compression type {kind} is not supported")
    inflater = zlib.decompressobj()
    try:
        out = inflater.decompress(body, MAX_INFLATED)
    except zlib.error as exc:
        raise InvalidMessage(f"compressed body does not inflate: {exc}") from None
    if inflater.unconsumed_tail:
        raise InvalidMessage("compressed body inflates past 64 MiB")
    return out


@dataclass(slots=True)
class StoredMessage:
    """A decoded stored record."""

    size: int
    partition: int
    index: int
    term: int
    sys_code: int
    priority: int
    client_ip: bytes
    send_time_ms: int
    store_time_ms: int
    body_crc: int
    flag: int
    body: bytes
    business_id: str
    attributes: dict[str, str] = field(default_factory=dict)
    extension: bytes = b""
    app: str = ""

    @property
    def is_batch(self) -> bool:
        return bool(self.sys_code & SYS_BATCH)

    @property
    def count(self) -> int:
        """How many indexes the record takes (items of a batch, else 1)."""
        return max(1, self.flag) if self.is_batch else 1

    @property
    def client_address(self) -> str:
        return decode_client_ip(self.client_ip, bool(self.sys_code & SYS_SHORT_ADDRESS))

    def items(self) -> list[BatchItem]:
        """Items of a batch; a zlib/zip-compressed batch body is inflated (the stored record
        keeps it compressed, so protocol fetches copy it as the producer sent it)."""
        if not self.is_batch:
            return [
                BatchItem(self.body, self.business_id, self.attributes, self.priority, self.flag)
            ]
        body = (
            inflate_body(self.body, self.sys_code) if self.sys_code & SYS_COMPRESSED else self.body
        )
        return decode_batch_body(body, self.count)


def decode_record(raw: bytes, *, parse_attributes: bool = True) -> StoredMessage:
    """Decode a stored record; raises :class:`InvalidMessage` when malformed."""
    try:
        (size, part, index, term, magic, sys_code, prio, ip, send, delta, crc, flag) = (
            HEADER.unpack_from(raw, 0)
        )
        pos = 61
        (blen,) = _I32.unpack_from(raw, pos)
        pos += 4
        if blen < 0 or pos + blen > len(raw):
            raise InvalidMessage("body length out of range")
        body = raw[pos : pos + blen]
        pos += blen
        bl = raw[pos]
        if bl > 127:
            raise InvalidMessage("negative businessId length")
        bid = raw[pos + 1 : pos + 1 + bl].decode("utf-8")
        pos += 1 + bl
        (al,) = _I16.unpack_from(raw, pos)
        if al < 0:
            raise InvalidMessage("negative attributes length")
        attrs_raw = raw[pos + 2 : pos + 2 + al]
        pos += 2 + al
        (el,) = _I32.unpack_from(raw, pos)
        if el < 0:
            raise InvalidMessage("negative extension length")
        ext = raw[pos + 4 : pos + 4 + el]
        pos += 4 + el
        apl = raw[pos]
        if apl > 127:
            raise InvalidMessage("negative app length")
        app = raw[pos + 1 : pos + 1 + apl].decode("utf-8")
        pos += 1 + apl
    except (struct.error, IndexError, UnicodeDecodeError) as exc:
        raise InvalidMessage("malformed message record") from exc
    if pos != len(raw) or size != len(raw):
        raise InvalidMessage("message size disagrees with its content")
    if magic != MAGIC:
        raise InvalidMessage("bad magic")
    ext, more = split_extension(ext)
    if more:
        attrs_raw = _joined(attrs_raw, more)
    attrs = decode_attributes(attrs_raw) if parse_attributes else {}
    return StoredMessage(
        size,
        part,
        index,
        term,
        sys_code,
        prio,
        ip,
        send,
        send + delta,
        crc,
        flag,
        body,
        bid,
        attrs,
        ext,
        app,
    )


def check_record(raw: bytes, *, max_body: int = DEFAULT_MAX_BODY) -> StoredMessage:
    """Decode and validate a record received from a producer (JMQ4 rules §8.5)."""
    msg = decode_record(raw, parse_attributes=False)
    if msg.sys_code < 0 or msg.sys_code >> 13:
        raise InvalidMessage("sysCode bits 13-15 must be clear")
    if len(msg.body) > max_body:
        raise MessageTooLarge(f"body of {len(msg.body)} bytes is over {max_body}")
    if len(msg.business_id) > MAX_BUSINESS_ID:
        raise InvalidMessage("businessId longer than 100 characters")
    if msg.is_batch:
        if msg.flag < 1:
            raise InvalidMessage("batch flag must be at least 1")
        if not msg.sys_code & SYS_COMPRESSED:
            decode_batch_body(msg.body, msg.flag, strict=True)
    parts = record_parts(raw)
    if parts is not None:
        check_properties(parts.attribute_bytes)
    return msg


def check_properties(text: bytes) -> None:
    """A record's properties text (its attributes, joined with what its extension carries
    behind :data:`PROPERTIES_TAG`) must parse as every reader parses it: a malformed
    ``\\uXXXX`` escape is refused when stored (InvalidMessage), not found by each consumer
    of the message. Text without an escape always parses."""
    if b"\\u" in text:
        decode_attributes(text, strict=True)


def joined_properties(attributes: bytes, extension: bytes) -> bytes:
    """The properties text of a record's ``attributes`` and ``extension`` fields, as
    :func:`record_parts` reads it."""
    if len(extension) > MARK_SIZE:
        more = split_extension(extension)[1]
        if more:
            return _joined(attributes, more)
    return attributes


def record_store_time(raw: bytes) -> int:
    """Store time (ms) of a record without decoding the rest."""
    send = _I64.unpack_from(raw, 39)[0]
    return send + _I32.unpack_from(raw, OFF_STORE_TIME)[0]


# send time, store-time delta and body length: bytes 39-46, 47-50 and 61-64 of a record
_VIEW_HEAD = struct.Struct(">qi10xi")
_new_tuple = tuple.__new__


class MessageView(NamedTuple):
    """What a front-end handing messages out one by one reads of a stored record."""

    store_time_ms: int
    body: bytes
    business_id: str
    attributes: dict[str, str]


class RecordParts(NamedTuple):
    """:class:`MessageView` with the attributes as stored: their Java-Properties bytes
    (followed by the lines the extension carries past the attributes field, if any)."""

    store_time_ms: int
    body: bytes
    business_id: str
    attribute_bytes: bytes


def record_parts(raw: bytes) -> RecordParts | None:
    """The store time, body, businessId and attribute bytes of a stored record, reading
    just those fields; None when the record does not hold together (:func:`message_view`
    decodes such a record in full, which raises :class:`InvalidMessage`)."""
    try:
        if raw[18:20] != b"\x12\x34":  # MAGIC
            return None
        send, delta, blen = _VIEW_HEAD.unpack_from(raw, 39)
        end = 65 + blen
        if blen < 0 or end > len(raw):
            return None
        bl = raw[end]
        at = end + 1 + bl  # past the businessId
        business_id = raw[end + 1 : at].decode("utf-8") if bl else ""
        (al,) = _I16.unpack_from(raw, at)
        ext_at = at + 2 + al
        if bl > 127 or al < 0 or ext_at > len(raw):
            return None
        (el,) = _I32.unpack_from(raw, ext_at)
    except (struct.error, IndexError, UnicodeDecodeError):
        return None
    # tuple.__new__ directly: a NamedTuple's own __new__ is a Python function (a quarter
    # of message_view's time, and it runs per message handed out)
    attrs = raw[at + 2 : ext_at] if al else b""
    if el > MARK_SIZE:  # it may carry properties past the attributes field
        attrs = joined_properties(attrs, raw[ext_at + 4 : ext_at + 4 + el])
    return _new_tuple(RecordParts, (send + delta, raw[65:end], business_id, attrs))


def message_view(raw: bytes) -> MessageView:
    """The store time, body, businessId and attributes of a stored record, reading just
    those fields: what a front-end that hands messages out one by one puts on the wire
    (HTTP-MQ's msgList, VibeMQ's deliver), at a fraction of :func:`decode_record`'s cost.
    A record that does not hold together is decoded in full, which raises
    :class:`InvalidMessage`."""
    parts = record_parts(raw)
    if parts is None:
        stored = decode_record(raw)
        return MessageView(stored.store_time_ms, stored.body, stored.business_id, stored.attributes)
    store_time, body, business_id, attrs = parts
    return _new_tuple(
        MessageView, (store_time, body, business_id, decode_attributes(attrs) if attrs else {})
    )


def record_priority(raw: bytes, offset: int = 0) -> int:
    """The priority byte of the record at ``offset`` of ``raw`` (0 when too short to hold one)."""
    at = offset + OFF_PRIORITY
    return int.from_bytes(raw[at : at + 1], "big", signed=True)


def record_count(raw: bytes, offset: int = 0) -> int:
    """Indexes the record at ``offset`` of ``raw`` takes: a batch's items (its flag, at
    least 1), else 1 — without decoding it."""
    (sys_code,) = _I16.unpack_from(raw, offset + 20)
    if sys_code & SYS_BATCH:
        (flag,) = _I16.unpack_from(raw, offset + 59)
        return max(1, flag)
    return 1


def record_index(raw: bytes) -> int:
    """The index stored in a record."""
    return _I64.unpack_from(raw, OFF_INDEX)[0]


def with_position(raw: bytes, partition: int, index: int) -> bytes:
    """A copy of ``raw`` carrying another partition and index (retry deliveries)."""
    buf = bytearray(raw)
    _I16.pack_into(buf, OFF_PARTITION, partition)
    _I64.pack_into(buf, OFF_INDEX, index)
    return bytes(buf)


def split_blob(blob: bytes) -> list[bytes]:
    """The records of ``blob`` (records concatenated, each starting with its size)."""
    out, pos = [], 0
    while pos + 4 <= len(blob):
        (size,) = _I32.unpack_from(blob, pos)
        if size < FIXED_SIZE or pos + size > len(blob):
            raise InvalidMessage("record size disagrees with its content")
        out.append(bytes(blob[pos : pos + size]))
        pos += size
    return out
