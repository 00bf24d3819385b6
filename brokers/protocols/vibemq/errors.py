"""Typed errors of the VibeMQ codec, each telling the server what to send and whether to close.

``error_code`` is the code of the ``error`` frame to send (``None``: close silently, as for
framing errors, §1). ``request_id`` is the offending frame's id when it could be read (a
string of 1–256 characters), to echo in the error frame (§4); ``None`` means "use a fresh id".
``close`` says whether the connection must be closed after the error frame.
"""

from __future__ import annotations

from typing import ClassVar

from brokers.protocols.vibemq.enums import ErrorCode


class VibeMQError(ValueError):
    """Base of every error the VibeMQ codec raises or reports."""


class ProtocolError(VibeMQError):
    """Bad input from the peer; reported by the decoders (see the module docstring)."""

    error_code: ClassVar[ErrorCode | None] = None
    close: ClassVar[bool] = True

    def __init__(self, detail: str, *, request_id: str | None = None) -> None:
        super().__init__(detail)
        self.request_id = request_id


class FramingError(ProtocolError):
    """The length-prefixed stream is unusable; close without an error frame (§1, §13)."""


class ZeroLengthFrame(FramingError):
    """A length prefix of 0."""


class FrameTooLarge(FramingError):
    """A length prefix over the configured maximum."""


class TruncatedFrame(FramingError):
    """The stream ended inside a frame (reported by ``FrameDecoder.eof``)."""


class UnparseableFrame(ProtocolError):
    """Not valid UTF-8, not JSON, or not a JSON object: ``INVALID_MESSAGE`` (fresh id), close."""

    error_code = ErrorCode.INVALID_MESSAGE


class InvalidUtf8(UnparseableFrame):
    """The frame body is not valid UTF-8."""


class InvalidJson(UnparseableFrame):
    """The frame body is not a JSON object."""


class InvalidMessage(ProtocolError):
    """A frame failing validation (id, headers, option values): ``INVALID_MESSAGE``, stay open."""

    error_code = ErrorCode.INVALID_MESSAGE
    close = False


class InvalidQueue(ProtocolError):
    """A missing or invalid queue name: ``INVALID_QUEUE``, stay open."""

    error_code = ErrorCode.INVALID_QUEUE
    close = False


class UnknownCommand(ProtocolError):
    """An unknown ``type``, or a server-only one from a client: ``UNKNOWN_COMMAND``, stay open."""

    error_code = ErrorCode.UNKNOWN_COMMAND
    close = False


class DecoderClosedError(VibeMQError):
    """``FrameDecoder.feed`` called after a closing error or after ``eof``."""


class EncodeError(VibeMQError):
    """A frame that cannot be written: a payload msgspec cannot encode, or JSON over 4 GiB."""
