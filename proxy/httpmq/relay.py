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

import httpx

from proxy.httpmq.envelope import CORS, ProxyError, Reply

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
        target = API_PREFIX + path[len("/mq") :]
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
        reply = Reply(answer.status_code, answer.content, [CORS])
        reply.header("Content-Type", answer.headers.get("content-type", "application/json"))
        return reply

    async def close(self) -> None:
        """Close the pool's connections."""
        await self._client.aclose()
