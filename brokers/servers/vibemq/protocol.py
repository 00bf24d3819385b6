"""The TCP transport: bytes ↔ length-prefixed codec ↔ :class:`Session`, nothing else.

Reading pauses while the session has ``max_pending_frames`` unprocessed frames, or
``max_pending_bytes`` of them, or the write buffer is over its high-water mark (the peer
does not read), so neither direction grows without bound: one connection holds at most
``max_pending_bytes`` + one frame (``max_frame_size``) + one read of frames. Framing errors
(a frame over ``max_frame_size`` among them) close the connection silently (§1).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from brokers.protocols.vibemq import (
    CommandType,
    ErrorCode,
    Frame,
    FrameDecoder,
    ProtocolError,
    encode_frame,
    error_frame,
    with_length,
    with_lengths,
)
from brokers.servers import turnwrite
from brokers.servers.turnwrite import TurnWriter
from brokers.servers.vibemq.commands import COMMANDS
from brokers.servers.vibemq.context import ServerContext
from brokers.servers.vibemq.hub import Hub
from brokers.servers.vibemq.session import Session, client_address

log = logging.getLogger("mqcloud.vibemq")


class VibeMQProtocol(asyncio.Protocol):
    """One VibeMQ TCP connection."""

    client_protocol = "vibemq"

    def __init__(self, ctx: ServerContext, hub: Hub, connections: set[VibeMQProtocol]) -> None:
        self.ctx, self.hub = ctx, hub
        self._connections = connections
        self._decoder = FrameDecoder(max_frame_size=ctx.config.max_frame_size)
        self._transport: asyncio.Transport | None = None
        self._write_paused = False
        self._read_paused = False
        self._admitted = False
        self._out = TurnWriter()
        self.session: Session | None = None

    # -------------------------------------------------------------- asyncio callbacks

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = self._out.transport = transport  # type: ignore[assignment]
        peer = transport.get_extra_info("peername") or ("", 0)
        verdict = self.ctx.gate.admit(str(peer[0]))
        if verdict is not None:
            if verdict == "limit":
                frame = error_frame(ErrorCode.CONNECTION_LIMIT, "too many connections")
                self._transport.write(encode_frame(frame))
            self._transport.close()
            return
        self._admitted = True
        self._connections.add(self)
        self.session = Session(
            self.ctx, self.hub, self, str(peer[0]), COMMANDS, client_address(peer)
        )
        self.session.start()

    def connection_lost(self, exc: Exception | None) -> None:
        self._connections.discard(self)
        if self._admitted:
            self._admitted = False
            self.ctx.gate.release()
        self._transport = self._out.transport = None
        # the session refers to this protocol: letting go of it here leaves no cycle, so
        # both go once the close is done (not at a full collection, rare with the broker's
        # GC thresholds)
        session, self.session = self.session, None
        if session is not None:
            self.hub.spawn(session.close())

    def data_received(self, data: bytes) -> None:
        if self.session is None or self._decoder.closed:
            return
        held = turnwrite.hold()  # what the frames cause at once leaves once the reads
        try:  # ready with this one are handled too (turnwrite.release_after_reads)
            for event, size in self._decoder.feed_sized(data):
                self.session.feed(event, size)
        finally:
            turnwrite.release_after_reads(held)
        self._update_reading()

    def eof_received(self) -> bool | None:
        if not self._decoder.closed:
            self._decoder.eof()  # a truncated frame is simply dropped: the peer left
        return None

    def pause_writing(self) -> None:
        self._write_paused = True
        self._update_reading()

    def resume_writing(self) -> None:
        self._write_paused = False
        self._update_reading()
        if self.session is not None:
            self.session.on_writable()

    # -------------------------------------------------------------- Transport (session side)

    def send(self, frame: Frame) -> None:
        """Queue ``frame``; everything sent in one turn of the event loop (a dispatch
        round's deliveries, a run of publish acks) goes out in one write."""
        self._out.write(encode_frame(frame))

    def send_json(self, body: bytes) -> None:
        """Queue a frame already encoded as its JSON (a delivery), like :meth:`send`."""
        self._out.write(with_length(body))

    def send_json_many(self, bodies: Sequence[bytes]) -> None:
        """:meth:`send_json` of each of ``bodies``: framed together, queued as one."""
        if bodies:
            self._out.write(with_lengths(bodies))

    @property
    def writable(self) -> bool:
        return self._transport is not None and not self._write_paused

    def close(self, error: ProtocolError | None = None) -> None:
        if self._transport is not None:
            self._out.flush()  # what was sent before the close still goes out
            self._transport.close()

    def shutdown_notice(self, frame: Frame) -> None:
        """Write the server's ``disconnect`` (acks are still read afterwards)."""
        assert frame.TYPE is CommandType.DISCONNECT
        self.send(frame)

    # -------------------------------------------------------------- flow control

    def _update_reading(self) -> None:
        transport = self._transport
        if transport is None or transport.is_closing() or self.session is None:
            return
        config = self.ctx.config
        busy = (
            self._write_paused
            or self.session.backlog >= config.max_pending_frames
            or self.session.backlog_bytes >= config.max_pending_bytes
        )
        if busy and not self._read_paused:
            transport.pause_reading()
            self._read_paused = True
        elif not busy and self._read_paused:
            transport.resume_reading()
            self._read_paused = False

    def frames_done(self) -> None:
        """The session caught up: read again if reading was paused for it."""
        self._update_reading()
