"""The event loop of the HTTP-MQ serving processes: uvloop, accepting as the brokers do.

uvloop's server accepts one connection per turn of the event loop; a serving process
busy with its clients turns it every few tens of milliseconds, so the keep-alive clients
of a fleet reconnecting at once (the proxy restarted, a network blip) waited in the accept
queue. uvicorn creates its server with ``loop.create_server(..., sock=...)`` on the
socket :func:`proxy.httpmq.server.listen_socket` bound; on this loop that call accepts
through :func:`brokers.servers.listening.serve_socket` — everything waiting, each time
the socket is readable. uvicorn takes it as its loop factory (``loop=`` an import path).
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from typing import Any

import uvloop

from brokers.servers.listening import LISTEN_BACKLOG, serve_socket


class AcceptingLoop(uvloop.Loop):  # type: ignore[misc]
    """uvloop whose ``create_server`` on a given plain socket accepts in bursts."""

    async def create_server(  # type: ignore[override]
        self,
        protocol_factory: Callable[[], asyncio.Protocol],
        host: Any = None,
        port: Any = None,
        *,
        sock: socket.socket | None = None,
        backlog: int = LISTEN_BACKLOG,
        ssl: Any = None,
        **kwargs: Any,
    ) -> Any:
        """:func:`~brokers.servers.listening.serve_socket` for a plain socket handed in
        (what uvicorn does); uvloop's own server otherwise (TLS, host and port)."""
        if sock is None or ssl is not None or kwargs or host is not None or port is not None:
            return await super().create_server(
                protocol_factory, host, port, sock=sock, backlog=backlog, ssl=ssl, **kwargs
            )
        return serve_socket(protocol_factory, sock, backlog)
