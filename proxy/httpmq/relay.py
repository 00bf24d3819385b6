"""The console-token endpoints (http-mq.md §5, §6, §13.1), answered by the web process.

Consumer configuration, unregistration and progress are operator actions: the caller is
a console user (REST API token), allowed by team membership, and a change is saved to
the catalog's consumer policy and recorded in the audit trail. All of that lives in the
console's database, which this service never touches; so these paths are relayed, as
they came, to the web process (``HTTPMQ_CONSOLE_URL``), where ``mqcloud/api/httpmq.py``
serves them under ``/api/v1/httpmq/…`` and answers with the same envelope. One code path
per endpoint: the web process no longer serves ``/mq/``.
"""

from __future__ import annotations

import logging
from urllib.parse import quote

import httpx

from proxy.httpmq.envelope import CORS, JSON, ProxyError, Reply, envelope

log = logging.getLogger(__name__)

API_PREFIX = "/api/v1/httpmq"
FORWARDED_HEADERS = (b"authorization", b"content-type", b"accept")
EXACT = frozenset(
    {
        "/mq/consumer/config",
        "/mq/unregister",
        "/mq/clustering/queue/offset",
        "/mq/broadcast/queue/offset",
    }
)


def is_console_path(path: str) -> bool:
    """Whether ``path`` is a console-token endpoint."""
    if path in EXACT:
        return True
    name = path[len("/mq/config/") :] if path.startswith("/mq/config/") else ""
    return bool(name) and "/" not in name


NON_JSON_ERRORS = {
    400: "BAD_PARAMETER",
    401: "UNAUTHENTICATED",
    403: "FORBIDDEN",
    404: "NOT_FOUND",
    405: "BAD_PARAMETER",
    500: "INTERNAL_ERROR",
}


def relayed(status: int, content_type: str, body: bytes, retry_after: str = "") -> Reply:
    """The client's reply to the web process's answer: the envelope it sent (with its
    ``Retry-After``, which http-mq.md §1 promises on 429 and 503), or, when it answered
    otherwise (an HTML error page: a host not in its ALLOWED_HOSTS, a crash), an envelope
    in its place — never a page; a status http-mq.md has no meaning for is 503."""
    if content_type.split(";", 1)[0].strip() == "application/json":
        reply = Reply(status, body, [JSON, CORS])
        if retry_after.isascii() and retry_after.isdigit():
            reply.header("Retry-After", retry_after)
        return reply
    log.warning("console relay: the web process answered %d with %r", status, content_type)
    message = f"the console answered {status}"
    if status in NON_JSON_ERRORS:
        return envelope(status, message=message, error=NON_JSON_ERRORS[status])
    return envelope(503, message=message, error="UNAVAILABLE", headers={"Retry-After": "1"})


def _relayed_path(path: str) -> str:
    """``path`` (decoded, as the client meant it) as the web process must receive it: each
    segment percent-encoded again — a consumer name with ``?``, ``#`` or a control byte
    stays the name (``/mq/config/a%3Fb`` was relayed as ``config/a`` with a query, and a
    control byte made the HTTP client raise: 500), and a name of dots stays a name rather
    than a step up the path."""
    return "/".join(
        "%2E" * len(segment) if segment and set(segment) == {"."} else quote(segment, safe="")
        for segment in path.split("/")
    )


class ConsoleRelay:
    """Forwards console-token requests to the web process over a keep-alive pool."""

    def __init__(self, console_url: str, *, timeout: float = 30.0) -> None:
        self.console_url = console_url
        self._client = httpx.AsyncClient(
            base_url=console_url,
            timeout=timeout,
            limits=httpx.Limits(max_connections=32, max_keepalive_connections=8),
            trust_env=False,
        )

    async def forward(
        self,
        method: str,
        path: str,
        query: bytes,
        headers: dict[bytes, bytes],
        body: bytes,
        client: str,
    ) -> Reply:
        """The web process's answer to the request, or 503 when it cannot be reached."""
        target = API_PREFIX + _relayed_path(path[len("/mq") :])
        if query:
            target += "?" + query.decode("latin-1")
        sent = [(name, headers[name]) for name in FORWARDED_HEADERS if name in headers]
        sent.append((b"x-forwarded-for", client.encode("latin-1")))
        try:
            answer = await self._client.request(method, target, headers=sent, content=body)
        except httpx.HTTPError as exc:
            log.warning("console relay to %s failed: %s", self.console_url, type(exc).__name__)
            raise ProxyError(
                503,
                "UNAVAILABLE",
                "the console is unreachable; try again",
                {"Retry-After": "1"},
            ) from None
        return relayed(
            answer.status_code,
            answer.headers.get("content-type", ""),
            answer.content,
            answer.headers.get("retry-after", ""),
        )

    async def close(self) -> None:
        """Close the pool's connections."""
        await self._client.aclose()
