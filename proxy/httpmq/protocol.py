"""uvicorn's httptools HTTP/1.1 protocol with the limits a public service needs.

uvicorn parses requests (httptools), keeps connections alive, applies backpressure and
runs the ASGI application; it does not bound a request's headers or the time to send
them, the time to send a body, or the number of connections, and it answers a malformed
request with a text page. :class:`LimitedProtocol` adds, per connection:

- a header deadline (``header_timeout``) from the connection's start or the first byte of
  each request until its headers are complete: a silent or slow client is dropped (408
  envelope when part of a request came, a plain close otherwise);
- a body deadline (``body_timeout``) from the headers to the body's last byte;
- a size bound on the request line and headers (``max_header_bytes``, 431 envelope);
- the envelope (400) for a request httptools cannot parse;
- a bound on connections per process (``max_connections``): past it the connection idle
  the longest (between requests, or not done sending headers) is closed to make room, and
  when every connection is busy with a request the new one gets a 503 envelope.

Keep-alive (``keepalive_timeout``) and body flow control are uvicorn's own. A complete
response sent as a start and one final body (what this application always sends) goes
out in one write instead of uvicorn's two (:class:`OneWriteCycle`): one system call per
answer, not two.
"""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar

import httptools
from uvicorn.protocols.http.httptools_impl import (
    STATUS_LINE,
    HttpToolsProtocol,
    RequestResponseCycle,
)

from proxy.httpmq.config import ProxyConfig
from proxy.httpmq.envelope import envelope, raw_response
from proxy.httpmq.metrics import Metrics


class OneWriteCycle(RequestResponseCycle):
    """uvicorn's request/response cycle writing a whole response at once when the
    application sends its start (with ``content-length``) and then its only body."""

    _start: Any = None

    async def send(self, message: Any) -> None:
        start = self._start
        if start is None:
            if message["type"] == "http.response.start" and not self.response_started:
                self._start = message  # held until the body comes
                return
            await super().send(message)
            return
        self._start = None
        headers = start.get("headers", ())
        if (
            message["type"] != "http.response.body"
            or message.get("more_body", False)
            or not any(name == b"content-length" for name, _ in headers)
        ):
            await super().send(start)
            await super().send(message)
            return
        if self.flow.write_paused and not self.disconnected:
            await self.flow.drain()
        if self.disconnected:
            return
        self.response_started = True
        self.waiting_for_100_continue = False
        parts = [STATUS_LINE[start["status"]]]
        for name, value in (*self.default_headers, *headers):
            if name == b"connection" and b"close" in value.lower():
                self.keep_alive = False
            parts += (name, b": ", value, b"\r\n")
        if not self.keep_alive:
            parts.append(b"connection: close\r\n")
        parts.append(b"\r\n")
        if self.scope["method"] != "HEAD":
            parts.append(message.get("body", b""))
        self.transport.write(b"".join(parts))
        self.response_complete = True
        self.message_event.set()
        if not self.keep_alive:
            self.transport.close()
        self.on_response()


class LimitedProtocol(HttpToolsProtocol):
    """One client connection (see the module docstring); made by :func:`protocol_class`."""

    limits: ClassVar[ProxyConfig]
    metrics: ClassVar[Metrics | None]
    idle: ClassVar[dict[LimitedProtocol, None]]  # idle connections, longest idle first

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deadline: asyncio.TimerHandle | None = None
        self._phase = "headers"  # headers (waiting for / reading them), body, answering
        self._header_bytes = 0
        self._began = False  # bytes of the current request have arrived
        self._oversized = False

    # ------------------------------------------------------------------ connections

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if self.metrics is not None:
            self.metrics.connections.inc()
        if len(self.connections) > self.limits.max_connections and not self._make_room():
            self._refuse(
                envelope(503, message="too many connections", error="UNAVAILABLE")
            )  # fmt: skip
            return
        self._set_idle()
        self._arm(self.limits.header_timeout, self._headers_late)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        self.idle.pop(self, None)
        if self.metrics is not None:
            self.metrics.connections.dec()
        super().connection_lost(exc)

    def _make_room(self) -> bool:
        """Close the connection idle the longest; False when none is idle."""
        for victim in self.idle:
            if victim is not self:
                self.idle.pop(victim)
                victim._disarm()
                victim.transport.close()
                return True
        return False

    def _set_idle(self) -> None:
        self.idle.pop(self, None)
        self.idle[self] = None

    def _refuse(self, reply: Any) -> None:
        self._disarm()
        self.idle.pop(self, None)
        if self.cycle is not None and not self.cycle.response_complete:
            if self.cycle.response_started:
                self.transport.close()
                return
            self.cycle.disconnected = True  # the application's sends are dropped
            self.cycle.message_event.set()
        if not self.transport.is_closing():
            self.transport.write(raw_response(reply))
            self.transport.close()

    # ------------------------------------------------------------------ deadlines

    def _arm(self, seconds: float, expired: Any) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(seconds, expired)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _headers_late(self) -> None:
        self._deadline = None
        if self._began:
            self._refuse(
                envelope(408, message="request headers not received in time", error="TIMEOUT")
            )
        elif not self.transport.is_closing():
            self.transport.close()

    def _body_late(self) -> None:
        self._deadline = None
        self._refuse(envelope(408, message="request body not received in time", error="TIMEOUT"))

    # ------------------------------------------------------------------ parsing

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self._deadline is None and not self.transport.is_closing():
            if self._phase == "headers" and self._began:
                self._arm(self.limits.header_timeout, self._headers_late)
            elif self._phase == "body":
                self._arm(self.limits.body_timeout, self._body_late)

    def _unsupported_upgrade_warning(self) -> None:
        """An ``Upgrade`` request is answered as plain HTTP; nothing to warn about (and a
        client sending many must not fill the log)."""

    def send_400_response(self, msg: str) -> None:
        if self._oversized:
            reply = envelope(431, message="request line and headers too large", error="BAD_REQUEST")
        else:
            reply = envelope(400, message="malformed HTTP request", error="BAD_REQUEST")
        self._refuse(reply)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._phase = "headers"
        self._began = True
        self._header_bytes = 0

    def on_url(self, url: bytes) -> None:
        self._header_bytes += len(url)
        if self._header_bytes > self.limits.max_header_bytes:
            self._oversized = True
            raise httptools.HttpParserError("request line too long")
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._header_bytes += len(name) + len(value) + 4
        if self._header_bytes > self.limits.max_header_bytes:
            self._oversized = True
            raise httptools.HttpParserError("headers too large")
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._disarm()
        self._phase = "body"
        self.idle.pop(self, None)
        super().on_headers_complete()
        if type(self.cycle) is RequestResponseCycle:
            # The cycle's task has not run yet, so it will call this class's send.
            self.cycle.__class__ = OneWriteCycle

    def on_message_complete(self) -> None:
        self._phase = "answering"
        self._began = False
        self._disarm()
        super().on_message_complete()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        done = self.cycle is None or self.cycle.response_complete  # nothing pipelined
        if done and self._phase == "answering" and not self.transport.is_closing():
            self._phase = "headers"
            self._set_idle()


def protocol_class(config: ProxyConfig, metrics: Metrics | None = None) -> type[LimitedProtocol]:
    """A :class:`LimitedProtocol` bound to ``config``'s limits, with its own registry of
    idle connections (one per serving process)."""
    return type(
        "HttpMqProtocol",
        (LimitedProtocol,),
        {"limits": config, "metrics": metrics, "idle": {}},
    )
