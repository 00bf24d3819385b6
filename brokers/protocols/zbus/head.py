"""Parsing one header block (start line + header lines, zbus.md §1).

Hand-written rather than ``httptools``: ``HttpRequestParser`` rejects the response-shaped
messages clients send on the same stream (``HTTP/1.1 200 OK`` with ``cmd: produce``), and
both httptools parsers reject header lines the spec says to ignore (lines without ``:``). The
rules here are the spec's: split at the first ``:``, trim, lower-case keys, last value wins.

Beyond the 2015 server, lines that cannot be written back safely are rejected: invalid UTF-8
or a control character other than tab anywhere in the start line or a header line, or an
empty header name. These are recoverable (:class:`MalformedHeader`,
:class:`MalformedStartLine`) as long as ``content-length`` itself is readable.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from brokers.protocols.zbus.aliases import PRECEDENCE, canonicalize
from brokers.protocols.zbus.constants import Header
from brokers.protocols.zbus.errors import (
    BadContentLength,
    BodyTooLarge,
    MalformedHeader,
    MalformedStartLine,
    ZbusDecodeError,
)
from brokers.protocols.zbus.message import RequestLine, StatusLine
from brokers.protocols.zbus.uri import split_uri

CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
"""Characters that may not appear in a start line, header name or value (tab is allowed)."""
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_VERSION = re.compile(r"HTTP/[0-9]\.[0-9]", re.IGNORECASE)
_STATUS = re.compile(r"[1-9][0-9]{2}")
_DIGITS = re.compile(rb"[0-9]+")


@dataclass(slots=True)
class Head:
    """A parsed header block: what the decoder needs to read the body and build the message."""

    start: RequestLine | StatusLine | None
    headers: dict[str, str]
    content_length: int
    msgid: str | None
    """The message's id (headers first, then URL parameters), for echoing in errors."""
    problem: ZbusDecodeError | None
    """A recoverable error to report once the body has been skipped."""


def parse_start_line(line: str) -> RequestLine | StatusLine:
    """Parse a request line or a status line (first token starting with ``HTTP``, any case)."""
    if CONTROL.search(line):
        raise MalformedStartLine("control character in start line")
    first, _, rest = line.partition(" ")
    if first[:4].upper() == "HTTP":
        status, _, reason = rest.partition(" ")
        if not _VERSION.fullmatch(first) or not _STATUS.fullmatch(status):
            raise MalformedStartLine(f"bad status line {line[:80]!r}")
        return StatusLine(status=int(status), reason=reason, version=first)
    parts = line.split(" ")
    if len(parts) != 3 or not _TOKEN.fullmatch(parts[0]) or not parts[1]:
        raise MalformedStartLine(f"bad request line {line[:80]!r}")
    if not _VERSION.fullmatch(parts[2]):
        raise MalformedStartLine(f"bad HTTP version in {line[:80]!r}")
    return RequestLine(method=parts[0], uri=parts[1], version=parts[2])


def _content_length(value: bytes, max_body: int, msgid: str | None) -> int:
    digits = value.strip(b" \t")
    if not _DIGITS.fullmatch(digits):
        raise BadContentLength(f"content-length {digits[:40]!r} is not a number", msgid=msgid)
    digits = digits.lstrip(b"0") or b"0"
    if len(digits) > len(str(max_body)) or int(digits) > max_body:
        raise BodyTooLarge(f"content-length {digits[:40].decode()} over {max_body}", msgid=msgid)
    return int(digits)


def _echoed(
    problem: ZbusDecodeError,
    headers: dict[str, str],
    start: RequestLine | StatusLine | None,
    msgid: str | None,
) -> None:
    """Give ``problem`` the id and the alias spellings (§3) its 400 repeats: those of the
    headers, and of the URL parameters when the id came from there."""
    problem.msgid = msgid
    family = canonicalize(headers)[1]
    if isinstance(start, RequestLine) and "?" in start.uri:
        family |= canonicalize(split_uri(start.uri)[1])[1]
    problem.aliases = family


def _msgid(headers: dict[str, str], start: RequestLine | StatusLine | None) -> str | None:
    """The id to echo in an error: from the headers, else from the URL parameters."""
    for name in PRECEDENCE[Header.MSGID]:
        if name in headers:
            return headers[name]
    if isinstance(start, RequestLine) and "?" in start.uri:
        params = split_uri(start.uri)[1]
        for name in PRECEDENCE[Header.MSGID]:
            if name in params:
                return params[name]
    return None


# Anything a line may not hold but CR and LF (a control character other than tab): where a
# block has none of these and every CR and LF is part of a CRLF, its lines need no check of
# their own. (One regex with look-arounds for bare CR and LF cost 2-3 us a block, five
# times the character class and the three counts together.)
_UNSAFE = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")

_LINES: dict[str, tuple[str, str]] = {}
"""Header line → its lower-cased key and trimmed value: clients repeat most lines on every
message (``cmd: produce``, ``mq: orders``); cleared when it reaches :data:`_LINES_MAX`."""
_LINES_MAX = 4096
_LINE_CACHED_MAX = 200
"""Longer lines are not kept (at most ``_LINES_MAX`` times this many characters)."""
_PER_MESSAGE = frozenset(PRECEDENCE[Header.MSGID])
"""Keys whose lines differ from message to message: not kept, they would only churn it."""
_LENGTHS: dict[str, int] = {}
"""``content-length`` value → the length, for values already checked (bounded like
:data:`_LINES`); a length over the caller's ``max_body`` is checked again."""


def _header_line(line: str) -> tuple[str, str] | None:
    """The key and value of a header line; None without ``:`` (ignored, §1)."""
    key, colon, value = line.partition(":")
    if not colon:
        return None
    found = (key.strip(" \t").lower(), value.strip(" \t"))
    if len(line) <= _LINE_CACHED_MAX and found[0] not in _PER_MESSAGE:
        if len(_LINES) >= _LINES_MAX:
            _LINES.clear()
        _LINES[line] = found
    return found


def _known_length(value: str, max_body: int, msgid: str | None) -> int:
    """:func:`_content_length` of a ``content-length`` value, remembered per value."""
    length = _LENGTHS.get(value)
    if length is not None and length <= max_body:
        return length
    length = _content_length(value.encode(), max_body, msgid)
    if len(value) <= 20:  # leading zeros make any length of value valid
        if len(_LENGTHS) >= _LINES_MAX:
            _LENGTHS.clear()
        _LENGTHS[value] = length
    return length


_parse_start_line = functools.lru_cache(maxsize=256)(parse_start_line)
"""Clients send the same few start lines (``GET / HTTP/1.1``); the lines are immutable."""


def parse_head(block: bytes, max_body: int) -> Head:
    """Parse ``block`` (the head without its final blank line).

    Raises :class:`BadContentLength` or :class:`BodyTooLarge` (both fatal); other problems are
    returned in ``Head.problem`` because the message can still be skipped whole.

    A block of valid UTF-8 with no control character, no bare CR or LF and no empty header
    name — every block a well-behaved client sends — is decoded once and split as text;
    any other takes the line-by-line path that finds its problem.
    """
    try:
        text = block.decode()
    except UnicodeDecodeError:
        return _parse_head_lines(block, max_body)
    breaks = text.count("\r\n")
    if _UNSAFE.search(text) or text.count("\r") != breaks or text.count("\n") != breaks:
        return _parse_head_lines(block, max_body)
    raw_start, *lines = text.split("\r\n")
    problem: ZbusDecodeError | None = None
    start: RequestLine | StatusLine | None = None
    try:
        start = _parse_start_line(raw_start)
    except MalformedStartLine as exc:
        problem = exc.with_traceback(None)
    headers: dict[str, str] = {}
    raw_length: str | None = None
    known = _LINES.get
    for line in lines:
        found = known(line) or _header_line(line)
        if found is None:
            continue
        key, value = found
        if key == "content-length":
            raw_length = value
        elif key:
            headers[key] = value
        else:
            return _parse_head_lines(block, max_body)
    return _completed(start, headers, problem, raw_length, max_body, _known_length)


def _parse_head_lines(block: bytes, max_body: int) -> Head:
    """:func:`parse_head`, line by line (each line decoded and checked on its own)."""
    raw_start, *lines = block.split(b"\r\n")
    problem: ZbusDecodeError | None = None
    start: RequestLine | StatusLine | None = None
    try:
        start = parse_start_line(raw_start.decode())
    except UnicodeDecodeError:
        problem = MalformedStartLine("start line is not UTF-8")
    except MalformedStartLine as exc:
        problem = exc.with_traceback(None)  # kept as a value: no frame cycle behind it
    headers: dict[str, str] = {}
    raw_length: bytes | None = None
    for line in lines:
        colon = line.find(b":")
        if colon < 0:
            continue
        if line[:colon].strip(b" \t").lower() == b"content-length":
            raw_length = line[colon + 1 :]
            continue
        try:
            key = line[:colon].decode().strip(" \t").lower()
            value = line[colon + 1 :].decode().strip(" \t")
        except UnicodeDecodeError:
            problem = problem or MalformedHeader("header line is not UTF-8")
            continue
        if not key or CONTROL.search(key) or CONTROL.search(value):
            problem = problem or MalformedHeader(f"bad header line {line[:80]!r}")
            continue
        headers[key] = value
    return _completed(start, headers, problem, raw_length, max_body, _content_length)


_Raw = TypeVar("_Raw", str, bytes)
"""A ``content-length`` value as a parser read it (text, or the line's bytes)."""


def _completed(
    start: RequestLine | StatusLine | None,
    headers: dict[str, str],
    problem: ZbusDecodeError | None,
    raw_length: _Raw | None,
    max_body: int,
    length_of: Callable[[_Raw, int, str | None], int],
) -> Head:
    """The head of a parsed block: its body length read by ``length_of`` (which raises a
    fatal error), and its problem or that error given the id and aliases to echo."""
    msgid = _msgid(headers, start)
    try:
        length = 0 if raw_length is None else length_of(raw_length, max_body, msgid)
    except ZbusDecodeError as exc:
        _echoed(exc, headers, start, msgid)
        raise
    if problem is not None:
        _echoed(problem, headers, start, msgid)
    return Head(start, headers, length, msgid, problem)
