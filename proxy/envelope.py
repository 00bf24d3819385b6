"""The HTTP-MQ response envelope ``{status, message, result, error}`` and its HTTP codes.

``status`` keeps mq-proxy's meaning (200, 201, 300, 400 …) and the HTTP status matches
it (http-mq.md §1); null fields are omitted; CORS is open on every response.
"""

from __future__ import annotations

from typing import Any

import orjson
from django.http import HttpResponse

HTTP_STATUS = {200: 200, 201: 200, 300: 202}


def envelope(
    status: int,
    *,
    message: str | None = None,
    result: Any = None,
    error: str | None = None,
    headers: dict[str, str] | None = None,
) -> HttpResponse:
    """A JSON envelope response; HTTP status from ``status``."""
    body: dict[str, Any] = {"status": status}
    if message is not None:
        body["message"] = message
    if result is not None:
        body["result"] = result
    if error is not None and status >= 300:
        body["error"] = error
    response = HttpResponse(
        orjson.dumps(body), status=HTTP_STATUS.get(status, status), content_type="application/json"
    )
    response["Access-Control-Allow-Origin"] = "*"
    for name, value in (headers or {}).items():
        response[name] = value
    return response


def ok(result: Any = None, message: str | None = None) -> HttpResponse:
    """200 with a result, or 201 (HTTP 200) without one."""
    return envelope(200 if result is not None else 201, result=result, message=message)


class ProxyError(Exception):
    """A failure answered with its envelope: status, machine code and cause."""

    def __init__(
        self, status: int, error: str, message: str, headers: dict[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.status, self.error, self.message = status, error, message
        self.headers = headers or {}

    def response(self) -> HttpResponse:
        return envelope(self.status, message=self.message, error=self.error, headers=self.headers)


def bad_parameter(message: str, error: str = "BAD_PARAMETER") -> ProxyError:
    return ProxyError(400, error, message)
