"""The zbus message: start line, canonical headers, body, and the zbus field accessors.

``headers`` holds lower-case keys in canonical spelling (aliases already folded, see
:mod:`~brokers.protocols.zbus.aliases`), URL parameters already merged and without
``content-length`` (the body's length is the framing; the encoder always writes it).
Treat the mapping as read-only and derive changed messages with :meth:`Message.with_headers`.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from urllib.parse import unquote

from brokers.protocols.zbus.aliases import AliasFamily
from brokers.protocols.zbus.constants import Command, Header

HTTP_VERSION = "HTTP/1.1"
_INT32 = re.compile(r"[+-]?[0-9]{1,10}", re.ASCII)
_STATUS = re.compile(r"[1-9][0-9]{2}", re.ASCII)


@dataclass(frozen=True, slots=True)
class RequestLine:
    """``<METHOD> <uri> HTTP/1.1``."""

    method: str = "GET"
    uri: str = "/"
    version: str = HTTP_VERSION


@dataclass(frozen=True, slots=True)
class StatusLine:
    """``HTTP/1.1 <status> <reason>``."""

    status: int = 200
    reason: str = "OK"
    version: str = HTTP_VERSION


def parse_int32(value: str | None) -> int | None:
    """A Java ``Integer.valueOf`` of the value: optional sign, decimal digits, 32-bit range."""
    if value is None or not _INT32.fullmatch(value):
        return None
    number = int(value)
    return number if -(2**31) <= number < 2**31 else None


def topic_matches(topics: Collection[str], topic: str | None) -> bool:
    """Whether a subscriber of ``topics`` takes a message of ``topic`` (§9.2): one of its
    topics, or ``*`` — the only match of a message without a topic."""
    return "*" in topics or (bool(topic) and topic in topics)


def parse_status(value: str | None) -> int | None:
    """A three-digit status (``reply_code``, a stored ``:status``), else ``None``."""
    return int(value) if value is not None and _STATUS.fullmatch(value) else None


@dataclass(frozen=True, slots=True)
class Message:
    """One zbus message, request- or response-shaped; the broker routes by headers only."""

    start: RequestLine | StatusLine = field(default_factory=RequestLine)
    headers: Mapping[str, str] = field(default_factory=dict)
    body: bytes = b""
    aliases: AliasFamily = AliasFamily.NONE
    """The alias spellings the sender used (§3); replies to it should repeat them."""

    def with_headers(self, updates: Mapping[str, str | None]) -> Message:
        """A copy with headers set (appended if new) or removed (value ``None``); this
        message itself when nothing changes (it runs per message: a produce's token
        removal, the broker's stamp)."""
        headers = dict(self.headers)
        changed = False
        for key, value in updates.items():
            if value is None:
                if key in headers:
                    del headers[key]
                    changed = True
            elif headers.get(key) != value:
                headers[key] = value
                changed = True
        if not changed:
            return self
        return Message(self.start, headers, self.body, self.aliases)

    @property
    def is_response(self) -> bool:
        """Response-shaped (``HTTP/1.1 200 OK``); clients send these too, e.g. RPC replies."""
        return isinstance(self.start, StatusLine)

    @property
    def status(self) -> int | None:
        """The status of a response-shaped message, else ``None``."""
        return self.start.status if isinstance(self.start, StatusLine) else None

    @property
    def path(self) -> str:
        """The request path without its leading ``/``, percent-decoded; ``""`` for responses."""
        if not isinstance(self.start, RequestLine):
            return ""
        path = self.start.uri.partition("?")[0]
        return unquote(path[1:] if path.startswith("/") else path, errors="replace")

    @property
    def command(self) -> str:
        """``cmd``; if absent or empty the path; if that is empty ``admin`` (§4)."""
        return self.headers.get(Header.CMD) or self.path or Command.ADMIN.value

    @property
    def mq(self) -> str | None:
        """``mq``; if absent or empty the path (§4); ``None`` when both are empty."""
        return self.headers.get(Header.MQ) or self.path or None

    @property
    def msgid(self) -> str | None:
        """``msgid`` (alias ``id``)."""
        return self.headers.get(Header.MSGID)

    @property
    def msgid_raw(self) -> str | None:
        """``msgid_raw`` (aliases ``msgid-raw``, ``rawid``)."""
        return self.headers.get(Header.MSGID_RAW)

    @property
    def mq_reply(self) -> str | None:
        """``mq_reply`` (alias ``mq-reply``)."""
        return self.headers.get(Header.MQ_REPLY)

    @property
    def sub_cmd(self) -> str:
        """``sub_cmd`` (alias ``method``); absent means ``""``, the index page (§11.2)."""
        return self.headers.get(Header.SUB_CMD, "")

    @property
    def reply_code(self) -> int | None:
        """``reply_code`` (alias ``reply-code``) when it is a three-digit status, else ``None``."""
        return parse_status(self.headers.get(Header.REPLY_CODE))

    @property
    def token(self) -> str | None:
        """``token``, the MQ access token, app token or admin token."""
        return self.headers.get(Header.TOKEN)

    @property
    def topic(self) -> str | None:
        """``topic`` as sent (a comma-separated list on consume)."""
        return self.headers.get(Header.TOPIC)

    @property
    def topics(self) -> list[str]:
        """``topic`` split on commas, items trimmed, empty items dropped (§9.2)."""
        return [t for t in (part.strip() for part in (self.topic or "").split(",")) if t]

    @property
    def ack(self) -> bool:
        """Ack switch (§8): on when absent or ``1`` / ``true`` (trimmed, any case)."""
        value = self.headers.get(Header.ACK)
        return value is None or value.strip().lower() in ("1", "true")

    @property
    def window(self) -> int:
        """Consume window (§9.1): default 1; ``-1`` streams; non-integers (and < -1) count as 1."""
        number = parse_int32(self.headers.get(Header.WINDOW))
        return 1 if number is None or number < -1 else number

    @property
    def broker(self) -> str | None:
        """``broker``: the broker address stamped on inbound messages, or a pinned broker."""
        return self.headers.get(Header.BROKER)

    @property
    def remote_addr(self) -> str | None:
        """``remote-addr``: the sender's ``ip:port`` stamped by the broker."""
        return self.headers.get(Header.REMOTE_ADDR)
