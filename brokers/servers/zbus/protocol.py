"""The asyncio protocol: bytes ↔ codec ↔ handlers, nothing else (like uvicorn's protocols).

Each decoded message runs as its own task (a run of produces to a catalog MQ and a
consume of a queue MQ without one, see :func:`~.dispatch.start_all`), so replies are written as soon as they are
ready, out of order when that is faster (§6). At most ``max_inflight`` holding at most
``max_held_bytes`` run per connection; beyond that, and while the peer does not read,
reading pauses (so one connection holds at most that + one message + one read). A recoverable decode error
answers 400 and the stream goes on; a fatal one (lost framing, a message over the limits)
answers 400 and closes (§1). Bytes of two messages never interleave: every message is
encoded whole, and what one turn of the event loop sends is written with one ``write``.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Callable

from brokers.protocols.zbus import Decoder, Message, ZbusDecodeError, make_reply
from brokers.servers import turnwrite
from brokers.servers.flow import FlowControlled
from brokers.servers.protocol_errors import protocol_errors
from brokers.servers.turnwrite import TurnWriter
from brokers.servers.zbus.connection import Connection
from brokers.servers.zbus.context import ServerContext
from brokers.servers.zbus.dispatch import start_all

log = logging.getLogger("mqcloud.zbus")


def _peer(transport: asyncio.BaseTransport) -> str:
    peer = transport.get_extra_info("peername") or ("", 0)
    host, port = str(peer[0]), int(peer[1])
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class ZbusProtocol(FlowControlled):
    """One zbus connection."""

    log = log

    def __init__(self, ctx: ServerContext, connections: set[ZbusProtocol]) -> None:
        super().__init__()
        self.ctx = ctx
        self.max_inflight = ctx.config.max_inflight
        self.max_held_bytes = ctx.config.max_held_bytes
        self._connections = connections
        self._decoder = Decoder(
            max_head_bytes=ctx.config.max_head_bytes, max_body_bytes=ctx.config.max_body_bytes
        )
        self._out = TurnWriter()
        """Every message written whole; what one turn sends leaves in one ``write``."""
        self.conn = Connection("", self._out.write)

    # -------------------------------------------------------------- asyncio callbacks

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Create the connection state."""
        self._transport = self._out.transport = transport  # type: ignore[assignment]
        # the writer's methods, not the protocol's: a connection that referred back to its
        # protocol made a cycle, and what it held (its MQ runtime, catalog snapshot) waited
        # for a full collection, rare with the broker's GC thresholds, after it closed
        self.conn = Connection(_peer(transport), self._out.write, self._out.buffered)
        self.conn.end = _closer(weakref.ref(self))  # no cycle back to the protocol
        self._connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        """Undo what the connection holds (in-flight messages go back) and cancel its tasks."""
        self._connections.discard(self)
        self._transport = self._out.transport = None
        self.conn.close()
        self._cancel_tasks()

    def pause_writing(self) -> None:
        """The peer does not read: stop reading its requests, hold deliveries back."""
        super().pause_writing()
        self.conn.pause_writing()

    def resume_writing(self) -> None:
        """The write buffer drained: deliveries and requests go on."""
        self.conn.resume_writing()
        super().resume_writing()

    def data_received(self, data: bytes) -> None:
        """Feed the decoder and start what the messages ask for (:meth:`_start`); what
        that sends at once leaves in one write per connection once the reads ready with
        this one are handled too (:func:`turnwrite.release_after_reads`: long pollers
        and RPC callers answered together)."""
        if self._decoder.closed:
            return
        held = turnwrite.hold()
        try:
            self._received(data)
        finally:
            turnwrite.release_after_reads(held)

    def _received(self, data: bytes) -> None:
        messages: list[Message] = []
        for event in self._decoder.feed(data):
            if isinstance(event, Message):
                messages.append(event)
                continue
            self._start(messages)
            messages = []
            self._bad(event)
            if event.fatal:
                return
        self._start(messages)

    def _start(self, messages: list[Message]) -> None:
        if not messages:
            return
        for request, size, count in start_all(self.ctx, self.conn, messages):
            if isinstance(request, asyncio.Future):
                self._track(request, size, count)
            else:
                self._spawn(request, size)

    def eof_received(self) -> bool | None:
        """The peer closed: a cut-off message gets its 400, then the connection closes (what
        it held in flight goes back)."""
        problem = self._decoder.eof()
        if problem is not None:
            self._bad(problem)
        return False

    # -------------------------------------------------------------- messages

    def _bad(self, error: ZbusDecodeError) -> None:
        kind = "fatal" if error.fatal else "bad_request"
        protocol_errors.record(
            log, "zbus", kind, "zbus bad input from %s: %s", self.conn.remote_addr, error
        )
        self.conn.send(
            make_reply(400, error.reply_body, msgid=error.msgid, mq_reply=self.conn.session_id),
            error.aliases,
        )
        if error.fatal:
            self.close()

    def close(self) -> None:
        """Close the connection after flushing what was written (queued writes first)."""
        self._out.flush()
        super().close()


def _closer(protocol: weakref.ref[ZbusProtocol]) -> Callable[[], None]:
    """Closes the connection of ``protocol`` while it lives."""

    def end() -> None:
        proto = protocol()
        if proto is not None:
            proto.close()

    return end
