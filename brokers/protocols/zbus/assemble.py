"""Turning a parsed head and its body into a :class:`Message` (zbus.md §2, §3).

URL parameters are merged into the headers, headers winning (each side has its aliases folded
first, so a header ``id`` beats a parameter ``msgid``). The ``body`` parameter is never a
header: with no real body its UTF-8 bytes become the body, otherwise it is ignored. A
parameter that could not be written back as a header line (a ``:`` in its name, a control
character in its name or value) makes the request line malformed.
"""

from __future__ import annotations

from brokers.protocols.zbus.aliases import canonicalize
from brokers.protocols.zbus.constants import Header
from brokers.protocols.zbus.errors import MalformedStartLine
from brokers.protocols.zbus.head import CONTROL
from brokers.protocols.zbus.message import Message, RequestLine, StatusLine
from brokers.protocols.zbus.uri import split_uri


def assemble(start: RequestLine | StatusLine, headers: dict[str, str], body: bytes) -> Message:
    """Build the message the broker routes; raises :class:`MalformedStartLine` for bad params."""
    merged, aliases = canonicalize(headers)
    if isinstance(start, RequestLine) and "?" in start.uri:  # no query: no parameters
        _, params = split_uri(start.uri)
        body_param = params.pop(Header.BODY, None)
        for key, value in params.items():
            if ":" in key or CONTROL.search(key) or CONTROL.search(value):
                raise MalformedStartLine(f"URL parameter {key[:40]!r} cannot be a header")
        from_params, param_aliases = canonicalize(params)
        for key, value in from_params.items():
            merged.setdefault(key, value)
        aliases |= param_aliases
        if not body and body_param is not None:
            body = body_param.encode()
    merged.pop(Header.CONTENT_LENGTH, None)
    return Message(start=start, headers=merged, body=body, aliases=aliases)
