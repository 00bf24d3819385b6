"""App-token authentication of HTTP-MQ requests (http-mq.md §13.1).

The token comes from ``Authorization: Bearer <token>`` or a ``token`` parameter and is
looked up with the catalog's one token lookup (``CatalogSnapshot.app_for_token``: by hash,
confirmed in constant time); it is never logged. What the app may then do is the
engine's decision.
"""

from __future__ import annotations

from brokers.engine import AppInfo, CatalogSnapshot
from proxy.httpmq.envelope import ProxyError
from proxy.httpmq.request import Request


def bearer_token(request: Request) -> str | None:
    """The token the request carries, if any."""
    scheme, _, value = request.header(b"authorization").partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    return request.params.get("token") or None


def authenticate(snapshot: CatalogSnapshot, request: Request) -> AppInfo:
    """The app whose token the request carries; 401 without a valid one. Asked before a
    producer or consumer name is looked up, so a caller without a token cannot learn
    which names exist (404 against 401)."""
    token = bearer_token(request)
    if not token:
        raise ProxyError(401, "UNAUTHENTICATED", "token missing: send Authorization: Bearer")
    owner = snapshot.app_for_token(token)
    if owner is None:
        raise ProxyError(401, "UNAUTHENTICATED", "token invalid")
    return owner


def authorize(owner: AppInfo, app: str) -> None:
    """403 unless ``owner`` (:func:`authenticate`) is ``app``, the client's owner."""
    if owner.code != app:
        raise ProxyError(403, "FORBIDDEN", f"this token's app does not own app {app}'s client")
