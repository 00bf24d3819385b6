"""Incremental sans-IO frame decoder with the strict error classes of spec §8.5.

Feed received bytes with :meth:`FrameDecoder.feed` and drain events with
:meth:`FrameDecoder.next_event` (or iterate). Events:

* :class:`Frame` — a frame that decoded cleanly;
* :class:`MalformedFrame` — the header was readable but the payload was not (not consumed
  exactly, negative length/count, invalid UTF-8, bad language, unknown retryType, …). The
  frame is skipped; when ``needs_reply`` (a request that is not one-way), answer with a
  BooleanAck of status 6;
* :class:`UnknownCommand` — no payload class for that type (e.g. 34, 100–103). The frame is
  skipped; log it and send nothing;
* :class:`FatalError` — length < 23 or above the maximum, bad magic, version outside 1–4.
  The connection must be closed; the decoder discards any further input.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import ClassVar

from brokers.protocols.jmq4.codes import Code
from brokers.protocols.jmq4.errors import DecodeError
from brokers.protocols.jmq4.frame import Frame, payload_class
from brokers.protocols.jmq4.header import (
    MAGIC_BYTES,
    MAX_VERSION,
    MIN_VERSION,
    REQUEST_HEADER_SIZE,
    Header,
)
from brokers.protocols.jmq4.primitives import Reader

DEFAULT_MAX_FRAME_SIZE = 16 * 1024 * 1024
_COMPACT_THRESHOLD = 64 * 1024


@dataclass(frozen=True, slots=True)
class MalformedFrame:
    """A frame with a readable header but an invalid payload (answer with ``code``)."""

    code: ClassVar[Code] = Code.CN_PARAM_ERROR

    header: Header
    reason: str

    @property
    def needs_reply(self) -> bool:
        """True for a request that is not one-way: send ``boolean_ack(header, code, reason)``."""
        return not (self.header.is_response or self.header.one_way)


@dataclass(frozen=True, slots=True)
class UnknownCommand:
    """A frame whose type has no payload class in its direction; ``size`` is its length."""

    header: Header
    size: int


@dataclass(frozen=True, slots=True)
class FatalError:
    """A framing violation: the connection must be closed."""

    reason: str


Event = Frame | MalformedFrame | UnknownCommand | FatalError


def _decode(frame: bytes) -> Frame | MalformedFrame | UnknownCommand:
    """Decode one complete frame whose length, magic and version were already checked."""
    r = Reader(frame, 4)
    header = Header.read_fixed(r)
    try:
        if header.is_response:
            header = header.read_response_fields(r)
        cls = payload_class(header.type, header.direction)
        if cls is None:
            return UnknownCommand(header, len(frame))
        payload = cls.read(r, header.version)
    except DecodeError as exc:
        return MalformedFrame(header, str(exc))
    if r.remaining:
        return MalformedFrame(header, f"payload not consumed exactly: {r.remaining} bytes left")
    return Frame(header, payload)


class FrameDecoder:
    """Turns a byte stream into :data:`Event` objects; performs no I/O."""

    __slots__ = ("_buf", "_failed", "_max_frame_size", "_pos")

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        if max_frame_size < REQUEST_HEADER_SIZE:
            raise ValueError(f"max_frame_size must be at least {REQUEST_HEADER_SIZE}")
        self._max_frame_size = max_frame_size
        self._buf = bytearray()
        self._pos = 0
        self._failed = False

    @property
    def failed(self) -> bool:
        """True once a :class:`FatalError` was produced; further input is discarded."""
        return self._failed

    @property
    def buffered(self) -> int:
        """Bytes received but not yet turned into events."""
        return len(self._buf) - self._pos

    def feed(self, data: bytes) -> None:
        """Append received bytes."""
        if not self._failed:
            self._buf += data

    def _fail(self, reason: str) -> FatalError:
        self._failed = True
        self._buf = bytearray()
        self._pos = 0
        return FatalError(reason)

    def next_event(self) -> Event | None:
        """The next event, or ``None`` until more bytes arrive (or after a fatal error)."""
        if self._failed:
            return None
        buf, pos = self._buf, self._pos
        available = len(buf) - pos
        if available < 4:
            return None
        length = int.from_bytes(buf[pos : pos + 4], "big", signed=True)
        if length < REQUEST_HEADER_SIZE:
            return self._fail(f"frame length {length} below {REQUEST_HEADER_SIZE}")
        if length > self._max_frame_size:
            return self._fail(f"frame length {length} above maximum {self._max_frame_size}")
        magic = buf[pos + 4 : pos + 8]
        if magic != MAGIC_BYTES[: len(magic)]:
            return self._fail(f"bad magic 0x{bytes(magic).hex()}")
        if available > 8:
            version = buf[pos + 8] - 256 if buf[pos + 8] > 127 else buf[pos + 8]
            if not MIN_VERSION <= version <= MAX_VERSION:
                return self._fail(f"unsupported header version {version}")
        if available < length:
            return None
        frame = bytes(buf[pos : pos + length])
        pos += length
        if pos == len(buf):
            buf.clear()
            pos = 0
        elif pos > _COMPACT_THRESHOLD:
            del buf[:pos]
            pos = 0
        self._pos = pos
        return _decode(frame)

    def __iter__(self) -> Iterator[Event]:
        """Yield every event available from the bytes fed so far."""
        while (event := self.next_event()) is not None:
            yield event


def decode_frame(data: bytes, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> Frame:
    """Decode exactly one complete frame, raising :class:`DecodeError` for anything else."""
    decoder = FrameDecoder(max_frame_size)
    decoder.feed(data)
    event = decoder.next_event()
    if isinstance(event, Frame) and not decoder.buffered:
        return event
    if event is None or isinstance(event, Frame):
        raise DecodeError(f"expected exactly one frame in {len(data)} bytes")
    raise DecodeError(f"{type(event).__name__}: {getattr(event, 'reason', 'unknown type')}")
