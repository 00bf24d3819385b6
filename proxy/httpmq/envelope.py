"""The HTTP-MQ response envelope ``{status, message, result, error}`` and its HTTP codes.

Sans-IO: a :class:`Reply` is the status, headers and body bytes of a response, whoever
writes it (the ASGI application, the connection protocol for a malformed request, or the
web process for the console-token endpoints). ``status`` keeps mq-proxy's meaning (200,
201, 300, 400 …) and the HTTP status matches it (http-mq.md §1); null fields are omitted;
CORS is open on every response.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

HTTP_STATUS = {200: 200, 201: 200, 300: 202}
JSON = (b"content-type", b"application/json")
CORS = (b"access-control-allow-origin", b"*")
CLOSE = (b"connection", b"close")


@dataclass(slots=True)
class Reply:
    """A response: HTTP status, headers (lower-case names, bytes) and body."""

    status: int
    body: bytes = b""
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    error: str | None = None  # the envelope's error code (metrics)

    def header(self, name: str, value: str) -> Reply:
        """Add a header; returns the reply."""
        self.headers.append((name.lower().encode("latin-1"), value.encode("latin-1")))
        return self


def envelope(
    status: int,
    *,
    message: str | None = None,
    result: Any = None,
    error: str | None = None,
    headers: dict[str, str] | None = None,
) -> Reply:
    """A JSON envelope; HTTP status from ``status``."""
    body: dict[str, Any] = {"status": status}
    if message is not None:
        body["message"] = message
    if result is not None:
        body["result"] = result
    if error is not None and status >= 300:
        body["error"] = error
    else:
        error = None
    reply = Reply(HTTP_STATUS.get(status, status), orjson.dumps(body), [JSON, CORS], error)
    for name, value in (headers or {}).items():
        reply.header(name, value)
    return reply


def ok(result: Any = None, message: str | None = None) -> Reply:
    """200 with a result, or 201 (HTTP 200) without one."""
    return envelope(200 if result is not None else 201, result=result, message=message)


def raw_response(reply: Reply) -> bytes:
    """The whole HTTP/1.1 response of ``reply``, closing the connection: what a connection
    writes itself when no application runs (a malformed request, a timeout, a refusal)."""
    lines = [f"HTTP/1.1 {reply.status} {_REASONS.get(reply.status, 'Error')}".encode()]
    lines += [name + b": " + value for name, value in reply.headers]
    lines.append(b"content-length: " + str(len(reply.body)).encode())
    lines.append(b"connection: close")
    return b"\r\n".join(lines) + b"\r\n\r\n" + reply.body


_REASONS = {
    400: "Bad Request",
    408: "Request Timeout",
    413: "Content Too Large",
    431: "Request Header Fields Too Large",
    503: "Service Unavailable",
}


class ProxyError(Exception):
    """A failure answered with its envelope: status, machine code and cause."""

    def __init__(
        self, status: int, error: str, message: str, headers: dict[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.status, self.error, self.message = status, error, message
        self.headers = headers or {}

    def reply(self) -> Reply:
        """The envelope that answers this failure."""
        return envelope(self.status, message=self.message, error=self.error, headers=self.headers)


def bad_parameter(message: str, error: str = "BAD_PARAMETER") -> ProxyError:
    """400 with ``error`` (BAD_PARAMETER unless a more precise code applies)."""
    return ProxyError(400, error, message)


def too_large(limit: int) -> ProxyError:
    """413: the request body is over the service's limit (the connection is closed)."""
    return ProxyError(
        413,
        "MESSAGE_TOO_LARGE",
        f"request body over {limit} bytes",
        {"Connection": "close"},
    )
