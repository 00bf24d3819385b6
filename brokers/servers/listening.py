"""The listening sockets of the brokers' protocol ports, and how their connections are accepted.

Accept queue: asyncio's ``create_server`` listens with a backlog of 100 connections. A
broker serving a fleet gets far more at once: when it restarts, or when its clients all
lose their connections together (a network blip, a failover), thousands reconnect within a
moment while its event loop is busy serving the rest. Past the backlog the kernel drops
the handshakes, and each client so dropped waits for its SYN to be sent again — 1 s, then
3 s, 7 s, 15 s later. Measured with the default: of 1,000 zbus long pollers connecting at
once to a broker busy delivering, 99 got no message for 10 s. Every listening port of a
broker process uses :data:`LISTEN_BACKLOG` (the HTTP-MQ proxy's serving processes too, and
the Procfile's daphne endpoint for VibeMQ over WebSocket); the kernel caps it at
``net.core.somaxconn`` (4096 by default since Linux 5.4 — raise that too where a process
takes more at once).

Accepting: uvloop's server (libuv) accepts one connection per turn of the event loop. A
broker busy serving a fleet turns its loop every 20–40 ms, so the connections of a
reconnecting fleet waited in the accept queue and were taken at 25–50 a second:
``bench/zbus_fleet.py`` had up to 356 of 1,000 long pollers connected (the kernel had
completed their handshakes), their consume sent, and no answer for 10 s — those accepted
after their client gave up were served a message nobody read. :func:`listen` accepts
everything the queue holds each time the listening socket is readable (up to
:data:`ACCEPT_PER_TURN`), on any event loop, and hands each socket to the loop's own
transport (``connect_accepted_socket``). The HTTP-MQ serving processes run uvicorn on a
uvloop whose ``create_server`` does the same (:mod:`proxy.httpmq.accepting_loop`).
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
from collections.abc import Callable

log = logging.getLogger(__name__)

LISTEN_BACKLOG = 4096
"""Connections the kernel completes for a listening port before its loop accepts them."""
ACCEPT_PER_TURN = 1024
"""Connections accepted at most each time a listening socket is readable (the rest at the
next turn: a storm of connections does not hold the loop for its whole length)."""
OUT_OF_DESCRIPTORS_PAUSE_S = 1.0
"""How long a listening socket is not read after the process ran out of descriptors."""
_RESOURCE_ERRORS = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM}


class Listener:
    """Listening sockets whose connections are accepted in bursts (see the module
    docstring); what the servers use of ``asyncio.Server``: :attr:`sockets`,
    :meth:`close`, :meth:`wait_closed`."""

    def __init__(
        self, loop: asyncio.AbstractEventLoop, factory: Callable[[], asyncio.Protocol]
    ) -> None:
        self._loop = loop
        self._factory = factory
        self.sockets: list[socket.socket] = []
        self._opening: set[asyncio.Task[object]] = set()
        self._closed = asyncio.Event()

    def _start(self, sock: socket.socket, backlog: int) -> None:
        """Listen on the bound ``sock`` with ``backlog`` and accept from it."""
        sock.listen(backlog)
        sock.setblocking(False)
        self.sockets.append(sock)
        self._loop.add_reader(sock.fileno(), self._accept, sock)

    def _accept(self, sock: socket.socket) -> None:
        for _ in range(ACCEPT_PER_TURN):
            try:
                conn, _ = sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except ConnectionAbortedError:
                continue
            except OSError as exc:
                if exc.errno not in _RESOURCE_ERRORS:
                    log.exception("cannot accept on %s", sock.getsockname())
                    return
                log.error(
                    "cannot accept on %s: %s; not accepting for %.0f s",
                    sock.getsockname(),
                    exc,
                    OUT_OF_DESCRIPTORS_PAUSE_S,
                )
                self._loop.remove_reader(sock.fileno())
                self._loop.call_later(OUT_OF_DESCRIPTORS_PAUSE_S, self._resume, sock)
                return
            conn.setblocking(False)
            if conn.family in (socket.AF_INET, socket.AF_INET6):
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            task = self._loop.create_task(self._open(conn))
            self._opening.add(task)
            task.add_done_callback(self._opening.discard)

    def _resume(self, sock: socket.socket) -> None:
        if sock in self.sockets:
            self._loop.add_reader(sock.fileno(), self._accept, sock)

    async def _open(self, conn: socket.socket) -> None:
        try:
            await self._loop.connect_accepted_socket(self._factory, conn)
        except Exception as exc:  # the peer went away meanwhile, or the protocol failed
            log.info("a connection accepted was not opened: %s", exc)
            conn.close()

    def close(self) -> None:
        """Stop accepting: the listening sockets close (open connections stay)."""
        for sock in self.sockets:
            self._loop.remove_reader(sock.fileno())
            sock.close()
        self.sockets = []
        self._closed.set()

    async def wait_closed(self) -> None:
        """Until :meth:`close` was called and the connections accepted before are open."""
        await self._closed.wait()
        if self._opening:
            await asyncio.wait(set(self._opening))


def serve_socket(
    factory: Callable[[], asyncio.Protocol], sock: socket.socket, backlog: int = LISTEN_BACKLOG
) -> Listener:
    """Accept on ``sock`` (bound, listened on here with ``backlog``) as :func:`listen`
    does: for a server that binds its sockets itself (the HTTP-MQ serving processes)."""
    listener = Listener(asyncio.get_running_loop(), factory)
    listener._start(sock, backlog)
    return listener


async def listen(
    factory: Callable[[], asyncio.Protocol],
    host: str | None,
    port: int,
    *,
    reuse_port: bool = False,
) -> Listener:
    """Listen on ``host:port`` (every address ``host`` names; ``port`` 0 picks a free one)
    with :data:`LISTEN_BACKLOG`, ``SO_REUSEADDR`` and, with ``reuse_port``,
    ``SO_REUSEPORT`` (several processes share the port), as ``loop.create_server`` does;
    each connection gets a protocol from ``factory``."""
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(
        host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )
    listener = Listener(loop, factory)
    seen: set[tuple[object, ...]] = set()
    try:
        for family, kind, proto, _, address in infos:
            if (family, address) in seen:
                continue
            seen.add((family, address))
            sock = socket.socket(family, kind, proto)
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if reuse_port:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
                if family == socket.AF_INET6:
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                sock.bind(address)
                listener._start(sock, LISTEN_BACKLOG)
            except BaseException:
                sock.close()
                raise
    except BaseException:
        listener.close()
        raise
    return listener
