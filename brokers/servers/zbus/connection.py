"""Per-connection state: identity, the writer, and what must be undone when it closes."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

from brokers.protocols.zbus import AliasFamily, EncodeError, Message, encode_message

log = logging.getLogger("mqcloud.zbus")


class Connection:
    """One zbus connection as the handlers see it.

    ``session_id`` is the random UUID stamped as ``mq_reply`` when a message has none
    (§5). ``learned_timeout`` is the client's local consume timeout once it has shown one
    (§13.1). Cleanups registered with :meth:`on_close` run once when the connection ends.
    """

    def __init__(
        self, peer: str, write: Callable[[bytes], bool], buffered: Callable[[], int] = lambda: 0
    ) -> None:
        self.session_id = str(uuid.uuid4())
        self.remote_addr = peer
        self._remote_host: str | None = None  # read per consume: split once
        self._write = write
        self._corked: list[bytes] | None = None
        self.buffered = buffered
        """Bytes written but not yet handed to the kernel."""
        self._chains: dict[tuple[str, str], asyncio.Future[None]] = {}
        self.closed = False
        self.learned_timeout: float | None = None
        self._cleanups: list[Callable[[], None]] = []
        self.produce_lines: dict[tuple[str, bool], Any] = {}
        """Produces waiting to be stored, per (MQ, pub/sub), see :mod:`.batch`."""
        self.writing_paused = False
        """The peer does not read what was written (the transport's buffer is over its
        high-water mark): deliveries wait (see :meth:`when_writable`)."""
        self._on_writable: dict[object, Callable[[], None]] = {}
        self.client_app = ""
        """The app this connection's client is listed under (:func:`.produce.note_client`):
        the last one a request acted as."""
        self.end: Callable[[], None] = lambda: None
        """Closes the connection (set by the protocol, without a reference back to it)."""
        self.held_tokens: set[str] = set()
        """App tokens consumes on this connection acted on, held with the engine: rotating
        one in the console ends the connection (:mod:`brokers.engine.credentials`)."""
        self.consuming: tuple[Any, ...] | None = None
        """(weak reference to the catalog snapshot, MQ, token, queue, acting app, gate's
        answer) of this connection's last consume done at once (see
        :func:`.consume.consume_now`)."""

    @property
    def remote_host(self) -> str:
        """The host part of ``remote_addr`` (``host:port`` or ``[v6]:port``)."""
        if self._remote_host is None:
            addr = self.remote_addr
            host = addr.rsplit(":", 1)[0] if ":" in addr else ""
            self._remote_host = host[1:-1] if host.startswith("[") else host
        return self._remote_host

    def send(self, message: Message, aliases: AliasFamily = AliasFamily.NONE) -> bool:
        """Write ``message`` whole; False if the connection is gone or it cannot be encoded."""
        if self.closed:
            return False
        try:
            data = encode_message(message, aliases=aliases)
        except EncodeError:
            log.warning("zbus: cannot encode a message for %s", self.remote_addr, exc_info=True)
            return False
        return self.send_encoded(data)

    def send_encoded(self, data: bytes) -> bool:
        """Write one message's wire bytes whole; False if the connection is gone."""
        if self.closed:
            return False
        if self._corked is not None:
            self._corked.append(data)
            return True
        return self._write(data)

    def when_writable(self, owner: object, callback: Callable[[], None]) -> None:
        """Call ``callback`` once the peer read what waited (one per ``owner``: an MQ whose
        sessions on this connection hold their deliveries back)."""
        self._on_writable[owner] = callback

    def pause_writing(self) -> None:
        """The transport's buffer went over its high-water mark."""
        self.writing_paused = True

    def resume_writing(self) -> None:
        """The transport's buffer drained: those waiting deal again."""
        self.writing_paused = False
        callbacks, self._on_writable = self._on_writable, {}
        for callback in callbacks.values():
            try:
                callback()
            except Exception:
                log.exception("zbus: a writable callback of %s failed", self.remote_addr)

    def cork(self) -> None:
        """Hold what is sent from now on until :meth:`uncork` (a batch of deliveries is
        framed one by one and written with one write)."""
        if self._corked is None:
            self._corked = []

    def uncork(self) -> bool:
        """Write what was held, in one write; False if the connection is gone."""
        held, self._corked = self._corked, None
        if not held:
            return not self.closed
        return self._write(held[0] if len(held) == 1 else b"".join(held))

    @contextlib.asynccontextmanager
    async def ordered(self, kind: str, mq: str) -> AsyncIterator[None]:
        """Run the block after this connection's earlier ``kind`` blocks for ``mq`` finished:
        requests run concurrently, but two produces (or two consumes) to one MQ from one
        connection take effect in the order they arrived."""
        key = (kind, mq)
        previous = self._chains.get(key)
        mine: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._chains[key] = mine
        try:
            if previous is not None:
                with contextlib.suppress(BaseException):
                    await asyncio.shield(previous)
            yield
        finally:
            mine.set_result(None)
            if self._chains.get(key) is mine:
                del self._chains[key]

    def on_close(self, cleanup: Callable[[], None]) -> None:
        """Run ``cleanup`` when the connection closes (at once if it already has)."""
        if self.closed:
            cleanup()
        else:
            self._cleanups.append(cleanup)

    def close(self) -> None:
        """Mark closed and run the cleanups (idempotent)."""
        if self.closed:
            return
        self.closed = True
        self._on_writable.clear()
        cleanups, self._cleanups = self._cleanups, []
        for cleanup in reversed(cleanups):
            try:
                cleanup()
            except Exception:
                log.exception("zbus: cleanup of %s failed", self.remote_addr)

    @staticmethod
    def now() -> float:
        """Monotonic seconds, the clock of every timing rule."""
        return time.monotonic()
