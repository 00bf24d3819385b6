"""Health and metrics over HTTP on the monitoring port (vibemq.md §15).

``GET /health`` (200 healthy, 503 when Redis does not answer or memory use is above
``memory_limit_mb``) and ``GET /metrics`` (200), trailing slash optional, JSON in
snake_case; any other path is 404 and any other method 405. The figures are this broker
process's own counters. One request per connection (``Connection: close``).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import resource
import time
from datetime import UTC, datetime
from typing import Any

import httptools
import orjson

from brokers.servers.listening import LISTEN_BACKLOG
from brokers.servers.vibemq.context import ServerContext
from brokers.servers.vibemq.hub import Hub

log = logging.getLogger("mqcloud.vibemq")
MAX_REQUEST = 8192


def _memory_bytes() -> int:
    """Resident memory of this process (Linux /proc, else the peak from getrusage)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * resource.getpagesize()
    except (OSError, ValueError, IndexError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _uptime(seconds: float) -> str:
    days, rest = divmod(int(seconds), 86_400)
    h, rest = divmod(rest, 3600)
    m, s = divmod(rest, 60)
    clock = f"{h:02d}:{m:02d}:{s:02d}"
    return f"{days}.{clock}" if days else clock


class Monitor:
    """Builds the §15 documents from a server's context and hub."""

    def __init__(self, ctx: ServerContext, hub: Hub, memory_limit_mb: float = 1024.0) -> None:
        self.ctx, self.hub, self.memory_limit_mb = ctx, hub, memory_limit_mb
        self.started = time.monotonic()

    def _common(self) -> dict[str, Any]:
        return {
            "active_connections": self.ctx.gate.active,
            "in_flight_messages": sum(len(s.inflight) for s in self.hub.sessions),  # type: ignore[attr-defined]
            "total_messages_published": self.ctx.counters["published"],
            "total_messages_delivered": self.ctx.counters["delivered"],
            "timestamp": datetime.now(UTC).isoformat(),
        }

    async def health(self) -> tuple[int, dict[str, Any]]:
        store_ok = await self.ctx.engine.ping() is None
        memory_mb = _memory_bytes() / 2**20
        healthy = store_ok and memory_mb <= self.memory_limit_mb
        doc = {
            "is_healthy": healthy,
            "status": "healthy" if healthy else "unhealthy",
            **self._common(),
            "queue_count": len(self.ctx.queue_names()),
            "memory_usage_mb": round(memory_mb, 2),
        }
        return (200 if healthy else 503), doc

    def metrics(self) -> dict[str, Any]:
        c = self.ctx.counters
        delivered = c["delivered"]
        uptime = time.monotonic() - self.started
        doc = self._common()
        doc.pop("timestamp")
        return {
            **doc,
            "total_messages_acknowledged": c["acknowledged"],
            "total_retries": c["retries"],
            "total_dead_lettered": c["dead_lettered"],
            "total_oversize_undelivered": c["oversize"],
            "total_errors": c["errors"],
            "total_connections_accepted": self.ctx.gate.accepted,
            "total_connections_rejected": self.ctx.gate.rejected,
            "active_queues": len(self.hub.dispatchers),
            "memory_usage_bytes": _memory_bytes(),
            "average_delivery_latency_ms": (
                round(c["delivery_latency_ms"] / delivered, 3) if delivered else 0.0
            ),
            "timestamp": datetime.now(UTC).isoformat(),
            "uptime": _uptime(uptime),
            "uptime_seconds": round(uptime, 3),
        }

    async def respond(self, method: str, path: str) -> tuple[int, dict[str, Any]]:
        """Status and JSON body of one request."""
        route = path.split("?", 1)[0].rstrip("/") or "/"
        if route not in ("/health", "/metrics"):
            return 404, {"error": "not found"}
        if method not in ("GET", "HEAD"):
            return 405, {"error": "method not allowed"}
        if route == "/health":
            return await self.health()
        return 200, self.metrics()


class _Request:
    """httptools callbacks: the method, the URL, and when the request is complete."""

    def __init__(self) -> None:
        self.url = b""
        self.done = False

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_message_complete(self) -> None:
        self.done = True


_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed"}
_REASONS[503] = "Service Unavailable"


async def _serve(monitor: Monitor, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
    request = _Request()
    parser = httptools.HttpRequestParser(request)
    seen = 0
    try:
        while not request.done:
            data = await asyncio.wait_for(reader.read(4096), 10.0)
            seen += len(data)
            if not data or seen > MAX_REQUEST:
                raise ValueError("incomplete or oversized request")
            parser.feed_data(data)
        method = parser.get_method().decode()
        status, doc = await monitor.respond(method, request.url.decode("latin-1"))
    except (httptools.HttpParserError, ValueError, UnicodeDecodeError, TimeoutError):
        status, doc, method = 400, {"error": "bad request"}, "GET"
    body = orjson.dumps(doc)
    head = (
        f"HTTP/1.1 {status} {_REASONS[status]}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode()
    with contextlib.suppress(OSError):
        writer.write(head if method == "HEAD" else head + body)
        await writer.drain()
    writer.close()


async def start_monitor(monitor: Monitor, host: str, port: int) -> asyncio.Server:
    """Serve ``monitor`` on ``host:port`` (0 picks a port)."""
    handle = functools.partial(_handle, monitor)
    return await asyncio.start_server(
        handle, host, port, reuse_address=True, backlog=LISTEN_BACKLOG
    )


async def _handle(
    monitor: Monitor, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    try:
        await _serve(monitor, reader, writer)
    except Exception:
        log.exception("VibeMQ monitor request failed")
        writer.close()
