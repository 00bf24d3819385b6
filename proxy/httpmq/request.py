"""What an HTTP-MQ handler sees of a request: method, headers, parameters, addresses.

Built once per request from the ASGI scope and the body (:func:`from_scope`); no server
objects past this point. The client's address follows http-mq.md §3.1: blacklists judge
:attr:`Request.peer_address` (the connection, or what a trusted proxy says it forwards
for); ``clientIp`` is only recorded.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from proxy.httpmq import params as p
from proxy.httpmq.envelope import bad_parameter


@dataclass(slots=True)
class Request:
    """One HTTP-MQ request."""

    method: str
    path: str
    headers: dict[bytes, bytes]  # lower-case names; a repeated header keeps its last value
    params: dict[str, str]
    peer: str  # the TCP peer's address
    peer_address: str  # the peer, or whom a trusted proxy forwards for

    def header(self, name: bytes) -> str:
        """A header's value as text ('' when absent)."""
        return self.headers.get(name, b"").decode("latin-1")

    def cookie(self, name: str) -> str:
        """A cookie's value ('' when absent); surrounding quotes are dropped."""
        for part in self.header(b"cookie").split(";"):
            key, _, value = part.strip().partition("=")
            if key == name:
                return value.strip().strip('"')
        return ""

    def client_ip(self) -> str:
        """The consumer's address as recorded (§3.1): ``clientIp``, else
        :attr:`peer_address`. A client may name itself, but never past a blacklist."""
        value = self.params.get("clientIp")
        if value:
            if len(value) > 64:
                raise bad_parameter("clientIp must be at most 64 characters")
            return value
        return self.peer_address


def forwarded_for(headers: dict[bytes, bytes], peer: str, trusted: Collection[str]) -> str:
    """The peer, or, only when the peer is a trusted proxy, the first X-Forwarded-For
    entry, else X-Real-IP."""
    if peer not in trusted:
        return peer
    forwarded = headers.get(b"x-forwarded-for", b"").split(b",")[0].strip()
    if not forwarded:
        forwarded = headers.get(b"x-real-ip", b"").strip()
    return forwarded.decode("latin-1") if forwarded else peer


def from_scope(
    scope: dict[str, Any], headers: dict[bytes, bytes], body: bytes, trusted: Collection[str]
) -> Request:
    """The request of an ASGI HTTP scope, its headers (``dict(scope["headers"])``) and its
    whole body."""
    client = scope.get("client")
    peer = client[0] if client else ""
    method = scope["method"]
    params = p.collect(
        method, scope.get("query_string", b""), headers.get(b"content-type", b""), body
    )
    return Request(
        method, scope["path"], headers, params, peer, forwarded_for(headers, peer, trusted)
    )
