"""Incremental decoder for a zbus connection: bytes in, messages and error events out.

``feed`` returns, in stream order, :class:`Message` objects and :class:`ZbusDecodeError`
instances (returned, not raised, so messages decoded before an error are not lost). A
recoverable error (``fatal`` false) stands for one skipped message; after a fatal one the
decoder is closed and the broker replies 400 and closes the connection. A body shorter than
its ``content-length`` simply waits; :meth:`Decoder.eof` reports a message cut off by the end
of the stream. Empty lines (CRLF) between messages are skipped.
"""

from __future__ import annotations

from brokers.protocols.zbus.assemble import assemble
from brokers.protocols.zbus.constants import MAX_BODY_BYTES, MAX_HEAD_BYTES
from brokers.protocols.zbus.errors import (
    DecoderClosedError,
    HeadTooLarge,
    MalformedStartLine,
    TruncatedMessage,
    ZbusDecodeError,
)
from brokers.protocols.zbus.head import Head, parse_head
from brokers.protocols.zbus.message import Message

_END = b"\r\n\r\n"


class Decoder:
    """Splits one connection's byte stream into zbus messages (see the module docstring)."""

    def __init__(
        self, *, max_head_bytes: int = MAX_HEAD_BYTES, max_body_bytes: int = MAX_BODY_BYTES
    ) -> None:
        self.max_head_bytes = max_head_bytes
        self.max_body_bytes = max_body_bytes
        self._buffer = bytearray()
        self._scan_from = 0
        self._head: Head | None = None
        self._closed = False

    @property
    def closed(self) -> bool:
        """True after a fatal error or :meth:`eof`; further ``feed`` calls raise."""
        return self._closed

    def feed(self, data: bytes) -> list[Message | ZbusDecodeError]:
        """Add bytes from the connection; return every message (or error) they complete."""
        if self._closed:
            raise DecoderClosedError("decoder is closed")
        pending = self._buffer
        events: list[Message | ZbusDecodeError] = []
        if not pending and self._head is None and type(data) is bytes:
            # nothing held (the common case: whole messages per read): parse the chunk as
            # it came, keep only what is left of it
            pos = self._split(data, events)
            if pos < len(data) and not self._closed:
                pending += data[pos:] if pos else data
            self._scan_from = max(0, self._scan_from - pos)
            return events
        pending += data
        if self._head is not None:
            if len(pending) < self._head.content_length:
                return events  # still inside a body: nothing to copy or scan yet
        elif (
            len(pending) < self.max_head_bytes
            and not pending.startswith(b"\r\n")  # empty lines first: the loop skips them
            and pending.find(_END, self._scan_from) < 0
        ):
            # still inside a head: scanned from where the last scan ended, not copied (a
            # head sent byte by byte would otherwise be copied whole at every byte)
            self._scan_from = max(0, len(pending) - len(_END) + 1)
            return events
        # one copy of what arrived, sliced from then on: a bytearray slice made bytes would
        # copy each head and body twice
        pos = self._split(bytes(pending), events)
        del pending[:pos]
        self._scan_from = max(0, self._scan_from - pos)
        return events

    def _split(self, buffer: bytes, events: list[Message | ZbusDecodeError]) -> int:
        """Append the messages (or errors) ``buffer`` completes to ``events``; the
        position up to which it was consumed."""
        pos = 0
        while not self._closed:
            if self._head is None:
                while buffer.startswith(b"\r\n", pos):
                    pos += 2
                    self._scan_from = pos
                limit = pos + self.max_head_bytes
                end = buffer.find(_END, max(self._scan_from, pos), limit)
                if end < 0:
                    if len(buffer) >= limit:
                        self._fail(events, HeadTooLarge(f"no end of head in {limit - pos} bytes"))
                    else:
                        self._scan_from = max(pos, len(buffer) - len(_END) + 1)
                    break
                try:
                    self._head = parse_head(buffer[pos:end], self.max_body_bytes)
                except ZbusDecodeError as exc:
                    self._fail(events, exc)
                    break
                pos = end + len(_END)
            head = self._head
            if len(buffer) - pos < head.content_length:
                break
            body = buffer[pos : pos + head.content_length]
            pos += head.content_length
            self._head = None
            self._scan_from = pos
            events.append(self._message(head, body))
        return pos

    def eof(self) -> TruncatedMessage | None:
        """The peer closed its side: report a partial message, if any, and close the decoder."""
        if self._closed:
            return None
        self._closed = True
        pending = bytes(self._buffer)
        self._buffer.clear()
        if self._head is not None:
            missing = self._head.content_length - len(pending)
            return TruncatedMessage(
                f"stream ended {missing} bytes short of the body", msgid=self._head.msgid
            )
        if pending.lstrip(b"\r\n"):
            return TruncatedMessage(f"stream ended inside a head ({len(pending)} bytes)")
        return None

    def _fail(self, events: list[Message | ZbusDecodeError], error: ZbusDecodeError) -> None:
        # without its traceback: that would hold this frame (the received chunk, the event
        # list holding the error) in a reference cycle until the next full collection
        events.append(error.with_traceback(None))
        self._closed = True
        self._buffer.clear()

    @staticmethod
    def _message(head: Head, body: bytes) -> Message | ZbusDecodeError:
        if head.problem is not None:
            return head.problem
        assert head.start is not None, "parse_head reports a problem for a bad start line"
        try:
            return assemble(head.start, head.headers, body)
        except MalformedStartLine as exc:
            exc.msgid = head.msgid
            return exc.with_traceback(None)  # kept as a value: no frame cycle behind it
