"""Request flow control shared by the protocol servers' asyncio protocols.

Each decoded request runs as its own task (or, where a server handles a common request
without one, until its future is done); at most ``max_inflight`` run per connection
and together they hold at most ``max_held_bytes`` of request bytes; reading pauses beyond
either, while the peer does not read its replies (the transport asked us to pause
writing), and for good once a graceful stop began. What one connection holds is so
bounded by ``max_held_bytes`` + one frame (the largest the codec accepts; a larger one
gets the protocol's error) + one read. A protocol whose decoder hands out frames one at a
time stops taking them while :attr:`busy` and takes the rest in :meth:`_resumed`. A
server's ``stop()`` calls :meth:`stop_reading`, waits for :attr:`inflight`, then
:meth:`close`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine, Sequence
from typing import Any

from brokers.servers.listening import Listener


class FlowControlled(asyncio.Protocol):
    """Base of a server protocol: bounded per-connection concurrency with backpressure."""

    max_inflight: int = 128
    max_held_bytes: int = 32 * 1024 * 1024
    log: logging.Logger = logging.getLogger("mqcloud.servers")

    def __init__(self) -> None:
        self._transport: asyncio.Transport | None = None
        self._tasks: set[asyncio.Future[Any]] = set()
        self._sizes: dict[asyncio.Future[Any], int] = {}
        self._counts: dict[asyncio.Future[Any], int] = {}
        self._requests = 0
        """Requests running: a future may stand for several (a run handled together)."""
        self.held_bytes = 0
        self._reading_paused = False
        self._writing_paused = False
        self._stopping = False

    def pause_writing(self) -> None:
        """The peer does not read: stop reading its requests too."""
        self._writing_paused = True
        self._update_reading()

    def resume_writing(self) -> None:
        """The write buffer drained."""
        self._writing_paused = False
        self._update_reading()
        self._resumed()

    def _spawn(self, request: Coroutine[Any, Any, None], size: int = 0) -> None:
        """Run one request (``size`` bytes on the wire) as a task counted against
        ``max_inflight`` and ``max_held_bytes``."""
        self._track(asyncio.get_running_loop().create_task(request), size)

    def _track(self, request: asyncio.Future[Any], size: int = 0, count: int = 1) -> None:
        """Count ``count`` requests that run until ``request`` is done — a task, or the
        future of requests handled without one (their outcome is answered elsewhere) —
        against ``max_inflight`` and ``max_held_bytes``; a graceful stop waits for it."""
        self._tasks.add(request)
        if size:
            self._sizes[request] = size
            self.held_bytes += size
        if count != 1:
            self._counts[request] = count
        self._requests += count
        request.add_done_callback(self._done)
        self._update_reading()

    def _done(self, request: asyncio.Future[Any]) -> None:
        self._tasks.discard(request)
        self.held_bytes -= self._sizes.pop(request, 0)
        self._requests -= self._counts.pop(request, 1)
        if (
            isinstance(request, asyncio.Task)
            and not request.cancelled()
            and request.exception() is not None
        ):
            self.log.error("request task failed", exc_info=request.exception())
        self._update_reading()
        self._resumed()

    @property
    def busy(self) -> bool:
        """No more requests now: stopping, the peer not reading, or a limit reached."""
        return (
            self._stopping
            or self._writing_paused
            or self._requests >= self.max_inflight
            or self.held_bytes >= self.max_held_bytes
        )

    def _resumed(self) -> None:
        """A request ended or the peer read: a pull decoder takes its next frames here."""

    def _cancel_tasks(self) -> None:
        for task in self._tasks:
            task.cancel()

    def _update_reading(self) -> None:
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        busy = self.busy
        if busy and not self._reading_paused:
            transport.pause_reading()
            self._reading_paused = True
        elif not busy and self._reading_paused:
            transport.resume_reading()
            self._reading_paused = False

    def stop_reading(self) -> None:
        """Take no new requests (graceful shutdown)."""
        self._stopping = True
        self._update_reading()

    @property
    def requests(self) -> int:
        """Requests running (each of a run handled together counts)."""
        return self._requests

    @property
    def inflight(self) -> set[asyncio.Future[Any]]:
        """The requests still running."""
        return self._tasks

    def close(self) -> None:
        """Close the connection after flushing what was written."""
        if self._transport is not None:
            self._transport.close()


async def drain(protocols: Sequence[FlowControlled], grace: float) -> None:
    """Graceful stop, first step: no new requests on ``protocols``; running ones get
    ``grace`` seconds, then are cancelled (and given one more second to unwind)."""
    for proto in protocols:
        proto.stop_reading()
    pending = {t for proto in protocols for t in proto.inflight}
    if pending:
        _, still = await asyncio.wait(pending, timeout=grace)
        for task in still:
            task.cancel()
        if still:
            await asyncio.wait(still, timeout=1.0)


class ListeningServer:
    """What the protocol servers share: the listening asyncio server and the set of open
    connections (protocols add and remove themselves)."""

    def __init__(self, server: Listener, connections: set[Any]) -> None:
        self._server = server
        self._connections = connections

    @property
    def port(self) -> int:
        """The port actually bound (useful with port 0)."""
        return int(self._server.sockets[0].getsockname()[1])

    @property
    def connections(self) -> int:
        """Open connections."""
        return len(self._connections)
