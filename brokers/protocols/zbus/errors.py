"""Typed errors of the zbus codec, and whether the connection survives each.

Decode errors carry ``fatal``: ``False`` means the message's extent was known (head found and
``content-length`` valid), the bad message was consumed whole and the stream continues with
the next message; ``True`` means framing is lost (or the size limit of §1 was hit) and the
broker must reply 400 and close. ``msgid`` is the offending message's id when it could be read,
so the 400 can echo it (§12), under the alias spellings it used (``aliases``, §3). ``reply_body`` is the §12 body, ``Bad format: <reason>``.
"""

from __future__ import annotations

from typing import ClassVar

from brokers.protocols.zbus.aliases import AliasFamily


class ZbusError(ValueError):
    """Base of every error the zbus codec raises or reports."""


class ZbusDecodeError(ZbusError):
    """A message that could not be decoded; reported in stream order by the decoder."""

    fatal: ClassVar[bool] = True
    reason: ClassVar[str] = "invalid message"

    def __init__(self, detail: str, *, msgid: str | None = None) -> None:
        super().__init__(detail)
        self.msgid = msgid
        self.aliases = AliasFamily.NONE
        """The alias spellings the message used (§3): its 400 repeats them."""

    @property
    def reply_body(self) -> str:
        """The body of the 400 reply the broker sends for this error."""
        return f"Bad format: {self.reason}"


class MalformedStartLine(ZbusDecodeError):
    """Bad request/status line or URI parameter; recoverable, the message is skipped."""

    fatal = False
    reason = "malformed start line"


class MalformedHeader(ZbusDecodeError):
    """A header line with an empty name, a control character or invalid UTF-8; recoverable."""

    fatal = False
    reason = "malformed header"


class HeadTooLarge(ZbusDecodeError):
    """No end of head within the header limit; fatal (§1: reply 400, close)."""

    reason = "message too large"


class BodyTooLarge(ZbusDecodeError):
    """``content-length`` above the body limit; fatal (§1: reply 400, close)."""

    reason = "message too large"


class BadContentLength(ZbusDecodeError):
    """``content-length`` that is not a decimal number; fatal, the body's extent is unknown."""

    reason = "bad content-length"


class TruncatedMessage(ZbusDecodeError):
    """The stream ended inside a message (reported by ``Decoder.eof``); fatal."""

    reason = "truncated message"


class DecoderClosedError(ZbusError):
    """``feed`` called after a fatal error or after ``eof``."""


class EncodeError(ZbusError):
    """A message that cannot be written: bad start line, or a header that would break framing."""


class CreateMqError(ZbusError):
    """A ``create_mq`` body the broker rejects; ``reply_body`` is the exact §11.2 text."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason

    @property
    def reply_body(self) -> str:
        """The body of the 400 reply, e.g. ``Bad format: mqMode invalid``."""
        return f"Bad format: {self.reason}"
