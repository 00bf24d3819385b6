"""Answering a request: ``msgid`` and the session id echoed, the peer's spellings repeated,
errors suppressed where ``ack`` is off (zbus.md §6, §8, §12)."""

from __future__ import annotations

from collections.abc import Mapping

from brokers.protocols.zbus import Message, make_reply
from brokers.servers.zbus.connection import Connection


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
    conn.send(
        make_reply(status, body, msgid=request.msgid, mq_reply=conn.session_id, headers=headers),
        request.aliases,
    )
