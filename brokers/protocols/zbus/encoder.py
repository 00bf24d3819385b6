"""Writing zbus messages: start line, headers, ``content-length``, body (zbus.md §1).

Headers are written in the message's order as ``key: value``; after each canonical
``msgid`` / ``msgid_raw`` / ``mq_reply`` come the aliases of the recipient's
:class:`AliasFamily` (§3). ``content-length`` is always written last, computed from the body
(a ``content-length`` entry in the headers is ignored). Anything that would break the
recipient's framing raises :class:`EncodeError`.

:func:`encode_delivery` writes a stored message as delivered to a consumer in one pass —
the bytes :func:`encode_message` writes for :func:`~.replies.make_delivery`'s message,
without building it (it runs per delivered message); :func:`encode_reply` does the same
for :func:`~.replies.make_reply` (a produce's ack). Header lines that recur (the same
``mq``, ``remote-addr``, ``mq_reply`` on every message of a producer) come from a cache.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping

from brokers.protocols.zbus.aliases import AliasFamily, aliases_for
from brokers.protocols.zbus.constants import Header, reason_phrase
from brokers.protocols.zbus.errors import EncodeError
from brokers.protocols.zbus.head import CONTROL
from brokers.protocols.zbus.message import Message, RequestLine, StatusLine, parse_status

_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")


@functools.lru_cache(maxsize=256)
def _start_line(start: RequestLine | StatusLine) -> bytes:
    """The start line with its CRLF (cached: a server writes a few start lines)."""
    if isinstance(start, RequestLine):
        if not _TOKEN.fullmatch(start.method) or not start.uri or " " in start.uri:
            raise EncodeError(f"bad request line {start.method!r} {start.uri!r}")
        line = f"{start.method} {start.uri} {start.version}"
    else:
        if not 100 <= start.status <= 999:
            raise EncodeError(f"status {start.status} is not three digits")
        line = f"{start.version} {start.status} {start.reason}"
    if CONTROL.search(line):
        raise EncodeError(f"control character in start line {line[:80]!r}")
    return f"{line}\r\n".encode()


def writable_header(key: str, value: str) -> bool:
    """True when ``key: value`` can be written as a header line (a name without ``:`` or
    control characters, a value without control characters such as a line break)."""
    return bool(key) and ":" not in key and not CONTROL.search(key) and not CONTROL.search(value)


def encode_message(message: Message, *, aliases: AliasFamily = AliasFamily.NONE) -> bytes:
    """The wire bytes of ``message``, for a recipient whose alias family is ``aliases``.
    Lines that recur (``mq``, ``cmd``, a producer's address) come from a cache, per-message
    ids do not (they would only churn it)."""
    out = [_start_line(message.start)]
    plain = aliases is _NO_ALIASES
    for key, value in message.headers.items():
        if key == Header.CONTENT_LENGTH:
            continue
        line = _line(key, value) if key in _PER_MESSAGE_IDS else header_line(key, value)
        if line is None:
            raise EncodeError(f"header {key[:40]!r} cannot be written")
        out.append(line)
        if not plain and key in _ALIASED:
            _with_aliases(out, key, value, aliases)
    body = message.body
    out.append(b"content-length: %d\r\n\r\n" % len(body))
    out.append(body)
    return b"".join(out)


_LINES: dict[tuple[str, str], bytes | None] = {}
_LINES_MAX = 8192
"""Cached header lines; the cache starts over when full (unique values only cost a miss)."""
_STATUS_LINES: dict[int, bytes] = {}
_NO_ALIASES = AliasFamily.NONE
_ALIASED = frozenset({Header.MSGID, Header.MSGID_RAW, Header.MQ_REPLY})
_PER_MESSAGE_IDS = frozenset({Header.MSGID, Header.MSGID_RAW})
_SET_BY_DELIVERY = frozenset(
    {Header.MSGID, Header.MSGID_RAW, Header.TOKEN, Header.REDELIVERED, Header.CONTENT_LENGTH}
)


def _line(key: str, value: str) -> bytes | None:
    """``key: value`` CRLF as bytes; None when it cannot be written."""
    if not writable_header(key, value):
        return None
    return f"{key}: {value}\r\n".encode()


def header_line(key: str, value: str) -> bytes | None:
    """``key: value`` CRLF as bytes, from the cache when it recurs; None when it cannot be
    written (see :func:`writable_header`)."""
    try:
        return _LINES[key, value]
    except KeyError:
        pass
    if len(_LINES) >= _LINES_MAX:
        _LINES.clear()
    line = _LINES[key, value] = _line(key, value)
    return line


def _status_line(status: int) -> bytes:
    line = _STATUS_LINES.get(status)
    if line is None:
        if not 100 <= status <= 999:
            raise EncodeError(f"status {status} is not three digits")
        text = f"HTTP/1.1 {status} {reason_phrase(status)}"
        if CONTROL.search(text):
            raise EncodeError(f"control character in start line {text[:80]!r}")
        line = _STATUS_LINES[status] = f"{text}\r\n".encode()
    return line


def _with_aliases(out: list[bytes], key: str, value: str, aliases: AliasFamily) -> None:
    for alias in aliases_for(key, aliases):
        out.append(f"{alias}: {value}\r\n".encode())


def encode_delivery(
    headers: Mapping[str, str],
    body: bytes,
    *,
    msgid: str | None,
    status: int | None = None,
    own_status: int = 0,
    redelivered: bool = False,
    aliases: AliasFamily = AliasFamily.NONE,
) -> bytes:
    """The wire bytes of a stored message (``headers``, ``body``, response status
    ``own_status`` or 0) as delivered to a consumer: exactly
    ``encode_message(make_delivery(stored, msgid=…, status=…, redelivered=…), aliases=…)``
    (see :func:`~.replies.make_delivery` for the rules). Raises :class:`EncodeError` for a
    header that cannot be written."""
    stored_msgid = headers.get(Header.MSGID)
    if status is None:
        status = parse_status(headers.get(Header.REPLY_CODE)) or own_status or 200
    out = [_status_line(status)]
    plain = aliases is _NO_ALIASES
    lines = _LINES
    wrote_msgid = wrote_raw = wrote_redelivered = False
    for key, value in headers.items():
        if key in _SET_BY_DELIVERY:
            if key == Header.MSGID:
                wrote_msgid = True
                _consume_id(out, msgid, aliases)
            elif key == Header.MSGID_RAW:
                wrote_raw = True
                _delivery_id(out, Header.MSGID_RAW, stored_msgid, aliases)
            elif key == Header.REDELIVERED and redelivered:
                wrote_redelivered = True
                out.append(b"redelivered: 1\r\n")
            elif key == Header.REDELIVERED:
                _append_line(out, key, value)
            continue
        line = lines.get((key, value))
        if line is None:
            _append_line(out, key, value)
        else:
            out.append(line)
        if not plain and key in _ALIASED:
            _with_aliases(out, key, value, aliases)
    if not wrote_msgid:
        _consume_id(out, msgid, aliases)
    if not wrote_raw:
        _delivery_id(out, Header.MSGID_RAW, stored_msgid, aliases)
    if redelivered and not wrote_redelivered:
        out.append(b"redelivered: 1\r\n")
    out.append(b"content-length: %d\r\n\r\n" % len(body))
    out.append(body)
    return b"".join(out)


ALIASED = _ALIASED
"""Headers written with the recipient's aliases after them (§3)."""
SET_BY_DELIVERY = _SET_BY_DELIVERY
"""Stored headers a delivery does not copy as they are (it writes its own or none)."""


def alias_lines(key: str, value: str, aliases: AliasFamily) -> list[bytes]:
    """The lines of ``key``'s aliases in the family ``aliases`` (none for most keys)."""
    out: list[bytes] = []
    if aliases is not _NO_ALIASES and key in _ALIASED:
        _with_aliases(out, key, value, aliases)
    return out


def encode_delivery_blocks(
    before: bytes,
    after: bytes,
    stored_msgid: str,
    body: bytes,
    *,
    msgid: str | None,
    status: int | None = None,
    redelivered: bool = False,
    aliases: AliasFamily = AliasFamily.NONE,
) -> bytes:
    """:func:`encode_delivery` of a stored message whose headers arrive written: the
    lines (each ``key: value`` CRLF with its aliases, none of :data:`SET_BY_DELIVERY` or
    ``reply_code``) that stood ``before`` and ``after`` its stored ``msgid``
    ``stored_msgid``. The same bytes, without a dict of the headers and a look at each
    (it runs per delivered message)."""
    out = [_status_line(200 if status is None else status), before]
    _consume_id(out, msgid, aliases)
    out.append(after)
    _delivery_id(out, Header.MSGID_RAW, stored_msgid, aliases)
    if redelivered:
        out.append(b"redelivered: 1\r\n")
    out.append(b"content-length: %d\r\n\r\n" % len(body))
    out.append(body)
    return b"".join(out)


def _append_line(out: list[bytes], key: str, value: str) -> None:
    line = header_line(key, value)
    if line is None:
        raise EncodeError(f"header {key[:40]!r} cannot be written")
    out.append(line)


def _consume_id(out: list[bytes], msgid: str | None, aliases: AliasFamily) -> None:
    """The consume's ``msgid`` line: the same for every delivery of a streaming consume,
    so from the cache."""
    if msgid is None:
        return
    _append_line(out, Header.MSGID, msgid)
    if aliases is not _NO_ALIASES:
        _with_aliases(out, Header.MSGID, msgid, aliases)


def _delivery_id(out: list[bytes], key: str, value: str | None, aliases: AliasFamily) -> None:
    """A per-delivery id line (not cached: these values rarely recur), with its aliases."""
    if value is None:
        return
    if CONTROL.search(value):  # the key is one of ours
        raise EncodeError(f"header {key!r} cannot be written")
    out.append(f"{key}: {value}\r\n".encode())
    if aliases is not _NO_ALIASES:
        _with_aliases(out, key, value, aliases)


def encode_reply(
    status: int,
    body: bytes,
    *,
    msgid: str | None = None,
    mq_reply: str | None = None,
    aliases: AliasFamily = AliasFamily.NONE,
) -> bytes:
    """Exactly ``encode_message(make_reply(status, body, msgid=…, mq_reply=…),
    aliases=…)``, in one pass (a reply without further headers, such as a produce's ack).
    Raises :class:`EncodeError` as that would."""
    out = [_status_line(status)]
    _delivery_id(out, Header.MSGID, msgid, aliases)
    if mq_reply is not None:
        _append_line(out, Header.MQ_REPLY, mq_reply)
        if aliases is not _NO_ALIASES:
            _with_aliases(out, Header.MQ_REPLY, mq_reply, aliases)
    out.append(b"content-length: %d\r\n\r\n" % len(body))
    out.append(body)
    return b"".join(out)
