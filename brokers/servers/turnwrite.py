"""Writes coalesced per event-loop turn: what a protocol sends during one turn (a dispatch
round's deliveries, the replies of a stored run of produces) goes out in one ``write``
system call, in the order it was sent, instead of one call per message.

What handling a read sends (a long poll answered from memory, a refusal) is written when
the read is handled (:meth:`TurnWriter.hold` / :meth:`TurnWriter.release`), not a loop
turn later: left to the end of the turn it waited for another poll of the sockets, and a
client that waits for each answer before it asks again (a long poller) waited with it."""

from __future__ import annotations

import asyncio


class TurnWriter:
    """Queues whole messages for a transport and writes them at the end of the turn."""

    def __init__(self) -> None:
        self.transport: asyncio.WriteTransport | None = None
        self._pending: list[bytes] = []
        self.pending_bytes = 0
        self._held = False

    def write(self, data: bytes) -> bool:
        """Queue ``data`` (whole messages); False when the transport is gone or closing."""
        transport = self.transport
        if transport is None or transport.is_closing():
            return False
        if not self._pending and not self._held:
            asyncio.get_running_loop().call_soon(self.flush)
        self._pending.append(data)
        self.pending_bytes += len(data)
        return True

    def hold(self) -> None:
        """Queue what is written from now on until :meth:`release`, unscheduled."""
        self._held = True

    def release(self) -> None:
        """Write what was queued (while held, or before) now."""
        self._held = False
        if self._pending:
            self.flush()

    def flush(self) -> None:
        """Write what is queued now (before a close, say)."""
        pending, self._pending, self.pending_bytes = self._pending, [], 0
        transport = self.transport
        if pending and transport is not None and not transport.is_closing():
            transport.write(pending[0] if len(pending) == 1 else b"".join(pending))

    @property
    def buffered(self) -> int:
        """Bytes queued here and still in the transport's buffer."""
        transport = self.transport
        written = transport.get_write_buffer_size() if transport is not None else 0
        return written + self.pending_bytes
