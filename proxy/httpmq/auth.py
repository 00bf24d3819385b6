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


def header_token(authorization: str, schemes: tuple[str, ...] = ("bearer",)) -> str | None:
    """The token of an ``Authorization`` header value in one of ``schemes``, if any."""
    scheme, _, value = authorization.partition(" ")
    token = value.strip()
    return token if token and scheme.lower() in schemes else None


def bearer_token(request: Request) -> str | None:
    """The token the request carries, if any."""
    return header_token(request.header(b"authorization")) or request.params.get("token") or None


def refuse_app_token(snapshot: CatalogSnapshot, headers: dict[bytes, bytes]) -> None:
    """403 ``FORBIDDEN`` when the request carries an app's token (valid for produce and
    consume) where a console token is needed (http-mq.md §1, §13.1): the caller is who
    they say, the endpoint is not theirs. The web process, which knows only console
    users (``Bearer`` or ``Token``), would answer 401 as for a wrong token."""
    authorization = headers.get(b"authorization", b"").decode("latin-1")
    token = header_token(authorization, ("bearer", "token"))
    if token and snapshot.app_for_token(token):
        raise ProxyError(
            403,
            "FORBIDDEN",
            "this endpoint needs the console token (a console user's API token), not an app token",
        )


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
