"""The HTTP-MQ ASGI application: routing, bounded body reading, envelopes, metrics.

A plain ASGI callable (no framework, no middleware): each request is routed by its exact
path to a handler (:data:`proxy.httpmq.handlers.ROUTES`), the console-token relay
(:mod:`.relay`), ``/healthz`` or ``/metrics``; everything else is a 404 envelope. Every
answer, failures included, is the JSON envelope (http-mq.md §1). A body is read in the
chunks the server hands over and refused with 413 as soon as it passes the limit (at once
when ``Content-Length`` says so), so an oversized request is never held whole.
"""

from __future__ import annotations

import logging
from time import perf_counter
from typing import Any

from brokers.engine import EngineError
from brokers.servers.runtime import tune_gc
from proxy.httpmq.auth import refuse_app_token
from proxy.httpmq.config import ProxyConfig
from proxy.httpmq.envelope import CORS, ProxyError, Reply, envelope, too_large
from proxy.httpmq.handlers import ROUTES, engine_error
from proxy.httpmq.metrics import Metrics
from proxy.httpmq.relay import ConsoleRelay, is_console_path
from proxy.httpmq.report import ProcessReport
from proxy.httpmq.request import from_scope
from proxy.httpmq.runtime import Runtime

log = logging.getLogger("mqcloud.httpmq")
access_log = logging.getLogger("mqcloud.httpmq.access")

ENDPOINTS = {path: path[len("/mq/") :].replace("/", "_") for path in ROUTES} | {
    "/healthz": "healthz",
    "/metrics": "metrics",
}
PREFLIGHT_HEADERS = [
    CORS,
    (b"access-control-allow-methods", b"GET, POST, OPTIONS"),
    (b"access-control-allow-headers", b"Authorization, Content-Type"),
]

Scope = dict[str, Any]


class ClientGone(Exception):
    """The client disconnected before its request was read: nothing to answer."""


async def read_body(receive: Any, headers: dict[bytes, bytes], limit: int) -> bytes:
    """The request body, refused (413) once it passes ``limit`` bytes."""
    declared = headers.get(b"content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise too_large(limit)
    message = await receive()
    if message["type"] != "http.request":
        raise ClientGone
    body = message.get("body", b"")
    if not message.get("more_body", False):
        return body
    chunks, size = [body], len(body)
    while True:
        message = await receive()
        if message["type"] != "http.request":
            raise ClientGone
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise too_large(limit)
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


class HttpMqApp:
    """The ASGI application of one serving process; its engine starts with the lifespan."""

    def __init__(self, config: ProxyConfig, metrics: Metrics | None = None, index: int = 0) -> None:
        self.config = config
        self.metrics = metrics or Metrics()
        self.index = index  # this serving process's number
        self.runtime: Runtime | None = None
        self.report: ProcessReport | None = None
        self.relay: ConsoleRelay | None = None
        self.access_log = config.access_log

    # ------------------------------------------------------------------ lifespan

    async def startup(self) -> None:
        """Connect to Redis and load the catalog (the lifespan's start)."""
        self.runtime = await Runtime.start(self.config)
        self.relay = ConsoleRelay(self.config.console_url)
        config = self.config
        self.report = ProcessReport(
            self.runtime.engine, config.host, config.port, self.index, config.report_seconds
        )
        self.report.start()
        tune_gc()  # as runbroker does: fewer, smaller collections per request

    async def shutdown(self) -> None:
        """Withdraw the report, close the engine and the relay (the lifespan's end)."""
        if self.report is not None:
            await self.report.stop()
        if self.relay is not None:
            await self.relay.close()
        if self.runtime is not None:
            await self.runtime.close()

    async def _lifespan(self, receive: Any, send: Any) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                try:
                    await self.startup()
                except Exception as exc:
                    log.exception("HTTP-MQ could not start")
                    await send({"type": "lifespan.startup.failed", "message": str(exc)})
                    return
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.shutdown()
                await send({"type": "lifespan.shutdown.complete"})
                return

    # ------------------------------------------------------------------ requests

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        kind = scope["type"]
        if kind == "http":
            await self._http(scope, receive, send)
        elif kind == "lifespan":
            await self._lifespan(receive, send)

    async def _http(self, scope: Scope, receive: Any, send: Any) -> None:
        started = perf_counter()
        path = scope["path"]
        endpoint = ENDPOINTS.get(path, "other")
        try:
            reply = await self._answer(scope, receive, path)
        except ClientGone:
            return
        headers = reply.headers
        if reply.status != 204:
            headers = [*headers, (b"content-length", str(len(reply.body)).encode())]
        await send({"type": "http.response.start", "status": reply.status, "headers": headers})
        await send({"type": "http.response.body", "body": reply.body})
        elapsed = perf_counter() - started
        self.metrics.observe(endpoint, reply.status, reply.error, elapsed)
        if self.access_log:
            client = scope.get("client")
            access_log.info(
                '%s "%s %s" %d %d %.1fms',
                client[0] if client else "-",
                scope["method"],
                path,  # never the query string: it may carry a token
                reply.status,
                len(reply.body),
                elapsed * 1000,
            )

    async def _answer(self, scope: Scope, receive: Any, path: str) -> Reply:
        method = scope["method"]
        handler = ROUTES.get(path)
        try:
            if handler is None:
                if path == "/healthz" or path == "/metrics":
                    return await self._monitor(path, method)
                if not is_console_path(path):
                    return envelope(404, message=f"no HTTP-MQ endpoint {path}", error="NOT_FOUND")
            if method == "OPTIONS":
                return Reply(204, b"", PREFLIGHT_HEADERS)
            if handler is not None and method != "GET" and method != "POST":
                return envelope(405, message="use GET or POST", error="BAD_PARAMETER")
            headers = dict(scope["headers"])
            body = await read_body(receive, headers, self.config.max_body_bytes)
            runtime = self.runtime
            if runtime is None or self.relay is None:
                raise ProxyError(503, "UNAVAILABLE", "starting", {"Retry-After": "1"})
            if handler is None:
                refuse_app_token(runtime.catalog, headers)
                client = scope.get("client")
                return await self.relay.forward(
                    method,
                    path,
                    scope.get("query_string", b""),
                    headers,
                    body,
                    client[0] if client else "",
                )
            request = from_scope(scope, headers, body, self.config.trusted_proxies)
            return await handler(request, runtime)
        except ProxyError as exc:
            return exc.reply()
        except EngineError as exc:
            return engine_error(exc)
        except ClientGone:
            raise
        except Exception:
            log.exception("HTTP-MQ %s failed", path)
            return envelope(500, message="internal error", error="INTERNAL_ERROR")

    async def _monitor(self, path: str, method: str) -> Reply:
        if method != "GET" and method != "HEAD":
            return envelope(405, message="use GET", error="BAD_PARAMETER")
        if path == "/metrics":
            text, content_type = self.metrics.exposition()
            return Reply(200, text, [(b"content-type", content_type.encode())])
        return await self._health()

    async def _health(self) -> Reply:
        """200 when Redis answers and the catalog is loaded, else 503."""
        runtime = self.runtime
        if runtime is None:
            return envelope(503, message="starting", error="UNAVAILABLE")
        failure = await runtime.engine.ping()
        if failure is not None:
            return envelope(
                503, message=f"redis: {failure}", error="UNAVAILABLE",
                headers={"Retry-After": "1"},
            )  # fmt: skip
        return envelope(
            200, result={"redis": "ok", "catalogVersion": runtime.catalog.version}, message="ok"
        )
