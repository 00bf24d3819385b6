"""Answering a request: ``msgid`` and the session id echoed, the peer's spellings repeated,
errors suppressed where ``ack`` is off (zbus.md §6, §8, §12)."""

from __future__ import annotations

import logging
from collections.abc import Mapping

from brokers.protocols.zbus import EncodeError, Message, encode_reply, make_reply
from brokers.servers.zbus.connection import Connection

log = logging.getLogger("mqcloud.zbus")


class Refuse(Exception):
    """Answer the request with an error status (a handler's early exit)."""

    def __init__(self, status: int, body: str, *, always: bool = False) -> None:
        super().__init__(body)
        self.status, self.body = status, body
        self.always = always
        """Sent even when ``ack`` is off (admin and format errors)."""


def reply(
    conn: Connection,
    request: Message,
    status: int,
    body: bytes | str = b"",
    headers: Mapping[str, str] | None = None,
) -> None:
    """Write a reply to ``request``."""
    if headers:
        conn.send(
            make_reply(
                status, body, msgid=request.msgid, mq_reply=conn.session_id, headers=headers
            ),
            request.aliases,
        )
        return
    data = body.encode() if isinstance(body, str) else body
    try:  # the common reply (a produce's ack) without building a message
        out = encode_reply(
            status, data, msgid=request.msgid, mq_reply=conn.session_id, aliases=request.aliases
        )
    except EncodeError:
        log.warning("zbus: cannot encode a reply for %s", conn.remote_addr, exc_info=True)
        return
    conn.send_encoded(out)
