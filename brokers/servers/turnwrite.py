"""Writes coalesced per event-loop turn: what a protocol sends during one turn (a dispatch
round's deliveries, the replies of a stored run of produces) goes out in one ``write``
system call, in the order it was sent, instead of one call per message.

What handling a read sends — to its own connection (a long poll answered from memory, a
refusal) or to another (an RPC reply to its caller) — is written when the read is handled
(:func:`hold` / :func:`release` around the protocol's ``data_received``), not a loop turn
later: left to the end of the turn it waited for another poll of the sockets and the
handling of whatever they brought, and a client that waits for each answer before it
asks again (a long poller, an RPC caller) waited with it. A read handled in the loop's
I/O phase (uvloop calls ``data_received`` there) may instead leave what it wrote to the
end of that phase (:func:`release_after_reads`): the answers to the reads that were
ready together are written together, before the sockets are polled again."""

from __future__ import annotations

import asyncio

_held: list[TurnWriter] | None = None
"""While a read is handled: the writers written to meanwhile, flushed when it is."""


def hold() -> list[TurnWriter] | None:
    """A read is being handled: what is written until :func:`release` leaves then. Returns
    what to hand to :func:`release` (an enclosing hold, if any)."""
    global _held
    enclosing, _held = _held, []
    return enclosing


def holding() -> bool:
    """Whether a read is being handled (a :func:`hold` is open): what is written now
    leaves with that read's answers."""
    return _held is not None


def release(enclosing: list[TurnWriter] | None) -> None:
    """The read is handled: write what it caused, one write per connection."""
    global _held
    writers, _held = _held, enclosing
    for writer in writers or ():
        writer.listed = False
        writer.flush()


_reads_done: list[TurnWriter] = []
"""Writers that reads of this I/O phase wrote to, flushed once the phase is over."""
_flush_loop: asyncio.AbstractEventLoop | None = None
"""The loop a flush of :data:`_reads_done` is scheduled on, None when none is."""


def release_after_reads(enclosing: list[TurnWriter] | None) -> None:
    """:func:`release` for a read handled in the event loop's I/O phase: what it caused
    is written once every read of the phase is handled (a callback of the loop's next
    turn runs before it polls the sockets again), each connection in one write. A burst
    of reads ready together then has its answers written together: the peer woken by
    the first finds the others waiting, instead of sleeping again between them."""
    global _held, _flush_loop
    writers, _held = _held, enclosing
    if not writers:
        return
    loop = asyncio.get_running_loop()
    if _flush_loop is not loop:
        if _flush_loop is not None:  # a loop that stopped before its flush: its
            _reads_done.clear()  # connections went with it
        _flush_loop = loop
        loop.call_soon(_flush_reads_done)
    for writer in writers:
        writer.listed = False
        _reads_done.append(writer)


def _flush_reads_done() -> None:
    global _flush_loop
    _flush_loop = None
    writers = _reads_done[:]
    _reads_done.clear()
    for writer in writers:
        writer.flush()


class TurnWriter:
    """Queues whole messages for a transport and writes them at the end of the turn."""

    def __init__(self) -> None:
        self.transport: asyncio.WriteTransport | None = None
        self._pending: list[bytes] = []
        self.pending_bytes = 0
        self.listed = False
        """Written to while a read is handled: it flushes this writer when done."""

    def write(self, data: bytes) -> bool:
        """Queue ``data`` (whole messages); False when the transport is gone or closing."""
        transport = self.transport
        if transport is None or transport.is_closing():
            return False
        held = _held
        if held is not None:
            if not self.listed:
                self.listed = True
                held.append(self)
        elif not self._pending:
            asyncio.get_running_loop().call_soon(self.flush)
        self._pending.append(data)
        self.pending_bytes += len(data)
        return True

    def flush(self) -> None:
        """Write what is queued now (before a close, say)."""
        pending, self._pending, self.pending_bytes = self._pending, [], 0
        transport = self.transport
        if pending and transport is not None and not transport.is_closing():
            transport.write(pending[0] if len(pending) == 1 else b"".join(pending))

    def buffered(self) -> int:
        """Bytes queued here and still in the transport's buffer."""
        transport = self.transport
        written = transport.get_write_buffer_size() if transport is not None else 0
        return written + self.pending_bytes
