"""Writing zbus messages: start line, headers, ``content-length``, body (zbus.md §1).

Headers are written in the message's order as ``key: value``; after each canonical
``msgid`` / ``msgid_raw`` / ``mq_reply`` come the aliases of the recipient's
:class:`AliasFamily` (§3). ``content-length`` is always written last, computed from the body
(a ``content-length`` entry in the headers is ignored). Anything that would break the
recipient's framing raises :class:`EncodeError`.
"""

from __future__ import annotations

import re

from brokers.protocols.zbus.aliases import AliasFamily, aliases_for
from brokers.protocols.zbus.constants import Header
from brokers.protocols.zbus.errors import EncodeError
from brokers.protocols.zbus.head import CONTROL
from brokers.protocols.zbus.message import Message, RequestLine

_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")


def _start_line(message: Message) -> str:
    start = message.start
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
    return line


def writable_header(key: str, value: str) -> bool:
    """True when ``key: value`` can be written as a header line (a name without ``:`` or
    control characters, a value without control characters such as a line break)."""
    return bool(key) and ":" not in key and not CONTROL.search(key) and not CONTROL.search(value)


def encode_message(message: Message, *, aliases: AliasFamily = AliasFamily.NONE) -> bytes:
    """The wire bytes of ``message``, for a recipient whose alias family is ``aliases``."""
    lines = [_start_line(message)]
    for key, value in message.headers.items():
        if key == Header.CONTENT_LENGTH:
            continue
        if not writable_header(key, value):
            raise EncodeError(f"header {key[:40]!r} cannot be written")
        lines.append(f"{key}: {value}")
        lines.extend(f"{alias}: {value}" for alias in aliases_for(key, aliases))
    lines.append(f"{Header.CONTENT_LENGTH}: {len(message.body)}")
    return "\r\n".join(lines).encode() + b"\r\n\r\n" + message.body
