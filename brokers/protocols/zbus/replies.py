"""Building the messages the broker sends: replies, deliveries, tracker pushes (zbus.md §6–§12).

The error-body helpers return the exact texts of §4, §8 and §12, misspellings included
("forbbiden"), because clients may log or match them.
"""

from __future__ import annotations

from collections.abc import Mapping

from brokers.protocols.zbus.constants import Header, reason_phrase
from brokers.protocols.zbus.message import Message, RequestLine, StatusLine


def make_reply(
    status: int,
    body: bytes | str = b"",
    *,
    msgid: str | None = None,
    mq_reply: str | None = None,
    headers: Mapping[str, str] | None = None,
) -> Message:
    """A response-shaped reply: ``msgid`` and ``mq_reply`` first (when given), then ``headers``."""
    out: dict[str, str] = {}
    if msgid is not None:
        out[Header.MSGID] = msgid
    if mq_reply is not None:
        out[Header.MQ_REPLY] = mq_reply
    out.update(headers or {})
    data = body.encode() if isinstance(body, str) else body
    return Message(start=StatusLine(status, reason_phrase(status)), headers=out, body=data)


def make_delivery(
    stored: Message, *, msgid: str | None, status: int | None = None, redelivered: bool = False
) -> Message:
    """A stored message as delivered to a consumer (§5, §9.1, §9.2, §13.1).

    ``msgid`` becomes the consume's id and ``msgid_raw`` the producer's id; ``token`` is
    removed; ``redelivered: 1`` is added for a redelivery. Status: ``status`` if given (pub/sub
    passes 200), else the stored ``reply_code``, else the stored message's own status, else 200.
    """
    if status is None:
        status = stored.reply_code or stored.status or 200
    updates: dict[str, str | None] = {
        Header.MSGID: msgid,
        Header.MSGID_RAW: stored.msgid,
        Header.TOKEN: None,
    }
    if redelivered:
        updates[Header.REDELIVERED] = "1"
    delivered = stored.with_headers(updates)
    return Message(
        start=StatusLine(status, reason_phrase(status)), headers=delivered.headers, body=stored.body
    )


def make_request(headers: Mapping[str, str], body: bytes | str = b"") -> Message:
    """A request-shaped ``GET / HTTP/1.1`` message, e.g. ``track_pub`` / ``track_report``."""
    data = body.encode() if isinstance(body, str) else body
    return Message(start=RequestLine(), headers=dict(headers), body=data)


def bad_format(reason: str) -> str:
    """400 body for format errors: ``Bad format: <reason>``."""
    return f"Bad format: {reason}"


def command_not_supported(command: str) -> str:
    """400 body for an unknown ``cmd`` (§4)."""
    return bad_format(f"command({command}) not support")


def mq_not_found(mq: str) -> str:
    """404 body for an unknown MQ (§8)."""
    return f"MQ({mq}) Not Found"


def mq_forbidden(mq: str, token: str | None) -> str:
    """403 body for an MQ token mismatch (§8), with the 5.x misspelling and ``null``."""
    return f"MQ({mq}) forbbiden, token({'null' if token is None else token}) mismatched"


def mq_rate_limited(mq: str, retry_after_ms: int) -> str:
    """403 body when the acting app is over its rate limit on the MQ (mqcloud §13.3a:
    zbus has no status of its own for it; nothing was stored or delivered)."""
    return f"MQ({mq}) forbbiden, rate limit exceeded, retry after {retry_after_ms} ms"


ADMIN_FORBIDDEN = "admin forbidden, token mismatched"
"""403 body for an admin token mismatch (§11.2)."""
MESSAGE_TOO_LARGE = bad_format("message too large")
"""400 body sent before closing on an oversized message (§1)."""


def sub_cmd_not_found(sub_cmd: str) -> str:
    """404 body for an unknown admin sub-command (§11.2)."""
    return f"sub_cmd={sub_cmd} Not Found"
