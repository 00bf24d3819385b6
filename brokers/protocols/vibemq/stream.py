"""Incremental decoder for a VibeMQ TCP connection: length-prefixed bytes in, frames out.

``feed`` returns, in stream order, decoded frames and :class:`ProtocolError` instances
(returned, not raised, so frames decoded before an error are not lost). An error with
``close`` false stands for one rejected frame and the stream goes on; after one with
``close`` true the decoder is closed: a framing error (length 0, over the limit) means close
silently, an unparseable body means a best-effort ``INVALID_MESSAGE`` and close (§1).
"""

from __future__ import annotations

from brokers.protocols.vibemq.codec import LENGTH_PREFIX, MAX_FRAME_SIZE, decode_json
from brokers.protocols.vibemq.errors import (
    DecoderClosedError,
    FrameTooLarge,
    ProtocolError,
    TruncatedFrame,
    ZeroLengthFrame,
)
from brokers.protocols.vibemq.frames import Frame


class FrameDecoder:
    """Splits one connection's byte stream into frames (see the module docstring)."""

    def __init__(
        self, *, max_frame_size: int = MAX_FRAME_SIZE, accept_server_frames: bool = False
    ) -> None:
        self.max_frame_size = max_frame_size
        self.accept_server_frames = accept_server_frames
        self._buffer = bytearray()
        self._closed = False

    @property
    def closed(self) -> bool:
        """True after a closing error or :meth:`eof`; further ``feed`` calls raise."""
        return self._closed

    def feed(self, data: bytes) -> list[Frame | ProtocolError]:
        """Add bytes from the connection; return every frame (or error) they complete."""
        return [event for event, _size in self.feed_sized(data)]

    def feed_sized(self, data: bytes) -> list[tuple[Frame | ProtocolError, int]]:
        """:meth:`feed`, each event with the bytes its frame took on the wire (what a
        transport counts against its per-connection memory bound)."""
        if self._closed:
            raise DecoderClosedError("decoder is closed")
        pending = self._buffer
        pending += data
        events: list[tuple[Frame | ProtocolError, int]] = []
        prefix = LENGTH_PREFIX.size
        if len(pending) < prefix or (
            len(pending) - prefix < LENGTH_PREFIX.unpack_from(pending)[0] <= self.max_frame_size
        ):
            return events  # inside the first frame still: nothing to copy yet
        # one copy of what arrived, sliced from then on: a bytearray slice made bytes
        # would copy each frame twice
        buffer = bytes(pending)
        pos = 0
        while len(buffer) - pos >= prefix:
            (length,) = LENGTH_PREFIX.unpack_from(buffer, pos)
            if length == 0:
                events.append((ZeroLengthFrame("frame length 0"), prefix))
            elif length > self.max_frame_size:
                problem = FrameTooLarge(f"frame length {length} over {self.max_frame_size}")
                events.append((problem, prefix))
            elif len(buffer) - pos - prefix < length:
                break
            else:
                body = buffer[pos + prefix : pos + prefix + length]
                pos += prefix + length
                try:
                    frame = decode_json(body, accept_server_frames=self.accept_server_frames)
                    events.append((frame, prefix + length))
                except ProtocolError as exc:
                    # without its traceback: that would hold this frame (the buffer, the
                    # event list holding the error) in a cycle until a full collection
                    events.append((exc.with_traceback(None), prefix + length))
            last = events[-1][0] if events else None
            if isinstance(last, ProtocolError) and last.close:
                self._closed = True
                pending.clear()
                return events
        del pending[:pos]
        return events

    def eof(self) -> TruncatedFrame | None:
        """The peer closed its side: report a partial frame, if any, and close the decoder."""
        if self._closed:
            return None
        self._closed = True
        pending = len(self._buffer)
        self._buffer.clear()
        return TruncatedFrame(f"stream ended inside a frame ({pending} bytes)") if pending else None
