"""The asyncio protocol: bytes ↔ codec ↔ session, nothing else (like uvicorn's protocols).

Frames are decoded as they arrive and each request runs as its own task, so replies may
complete out of order. At most ``max_inflight`` requests holding at most
``max_held_bytes`` run per connection; beyond that, and while the transport's write buffer
is full, frames stay undecoded and reading pauses (TCP backpressure). Framing errors (a
frame over ``max_frame_size`` among them) close the connection; malformed payloads get a
BooleanAck status 6; unknown types are skipped without a reply. Protocol errors are
counted and logged by sample (:mod:`brokers.servers.protocol_errors`). A closed connection
releases the partition locks it held at once.
"""

from __future__ import annotations

import asyncio
import logging

from brokers.protocols.jmq4 import (
    FatalError,
    Frame,
    FrameDecoder,
    MalformedFrame,
    UnknownCommand,
    boolean_ack,
)
from brokers.servers.flow import FlowControlled
from brokers.servers.jmq4.connection import release_locks
from brokers.servers.jmq4.context import ServerContext
from brokers.servers.jmq4.dispatch import dispatch
from brokers.servers.jmq4.session import Session
from brokers.servers.protocol_errors import protocol_errors

log = logging.getLogger("mqcloud.jmq4")


class Jmq4Protocol(FlowControlled):
    """One JMQ4 connection."""

    log = log

    def __init__(self, ctx: ServerContext, connections: set[Jmq4Protocol]) -> None:
        super().__init__()
        self.ctx = ctx
        self.max_inflight = ctx.config.max_inflight
        self.max_held_bytes = ctx.config.max_held_bytes
        self._connections = connections
        self._decoder = FrameDecoder(ctx.config.max_frame_size)
        self.session = Session("", 0)

    # -------------------------------------------------------------- asyncio callbacks

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Remember the transport and the peer address."""
        self._transport = transport  # type: ignore[assignment]
        peer = transport.get_extra_info("peername") or ("", 0)
        self.session = Session(str(peer[0]), int(peer[1]), close=self.close)
        self._connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        """Cancel whatever is still running for this connection, then release the
        partition locks it held at once: its unacked messages go to other consumers now,
        not after their ack timeout (a consumer that stays connected and silent keeps
        its locks until then)."""
        self._connections.discard(self)
        self._transport = None
        self.ctx.engine.client_disconnected(self.session.address)
        self.session.release_credential()
        running = set(self._tasks)
        self._cancel_tasks()
        if running or self.session.locks or self.session.retries:
            self.ctx.clean_up(self._release(running))

    async def _release(self, running: set[asyncio.Task[None]]) -> None:
        if running:  # let them unwind first: a cancelled fetch marks what it may have taken
            await asyncio.wait(running, timeout=1.0)
        await release_locks(self.ctx, self.session)

    def data_received(self, data: bytes) -> None:
        """Feed the decoder and act on the complete events while not busy."""
        self._decoder.feed(data)
        self._take()

    def _resumed(self) -> None:
        if self._transport is not None:
            self._take()

    def _take(self) -> None:
        decoder = self._decoder
        while not self.busy:
            before = decoder.buffered
            event = decoder.next_event()
            if event is None:
                return
            if isinstance(event, Frame):
                if not event.header.is_response:
                    self._spawn(self._run(event), before - decoder.buffered)
            elif isinstance(event, MalformedFrame):
                protocol_errors.record(
                    log,
                    "jmq4",
                    "malformed",
                    "JMQ4 malformed frame from %s: %s",
                    self.session.address,
                    event.reason,
                )
                if event.needs_reply:
                    self._write(boolean_ack(event.header, event.code, event.reason).encode())
            elif isinstance(event, UnknownCommand):
                protocol_errors.record(
                    log,
                    "jmq4",
                    "unknown_type",
                    "JMQ4 unknown type %s from %s",
                    event.header.type,
                    self.session.address,
                )
            elif isinstance(event, FatalError):
                protocol_errors.record(
                    log,
                    "jmq4",
                    "framing",
                    "JMQ4 closing %s: %s",
                    self.session.address,
                    event.reason,
                )
                self.close()
                return

    # -------------------------------------------------------------- requests

    async def _run(self, frame: Frame) -> None:
        reply = await dispatch(self.ctx, self.session, frame)
        if reply is not None:
            self._write(reply)

    def _write(self, data: bytes) -> None:
        if self._transport is not None and not self._transport.is_closing():
            self._transport.write(data)
