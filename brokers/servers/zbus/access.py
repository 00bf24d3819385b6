"""Token checks (zbus.md §8, §11.2, §13.3, §13.3a).

The ``token`` of a produce, consume or request may be the MQ's own access token (compared
by hash, in constant time) or an mqcloud app token; with an app token the connection acts as
that app and the app's policies apply (it needs a producer or consumer policy on the topic,
unless it is an admin app; the policy's IP blacklist refuses the peer). An MQ without a token
is open. The admin token guards every admin request when it is configured.
"""

from __future__ import annotations

import hmac
import ipaddress

from brokers.engine import CatalogSnapshot
from brokers.engine.catalog import hash_token
from brokers.servers.zbus.mqs import MqRef


class Forbidden(Exception):
    """The token does not open the MQ."""


_cache: list[tuple[CatalogSnapshot, dict[str, str]]] = []


def _apps_by_hash(snapshot: CatalogSnapshot) -> dict[str, str]:
    """Token hash → app code, built once per snapshot."""
    if _cache and _cache[0][0] is snapshot:
        return _cache[0][1]
    table = {h: app.code for app in snapshot.apps.values() for h in app.token_hashes}
    _cache[:] = [(snapshot, table)]
    return table


def app_of(snapshot: CatalogSnapshot, token: str | None) -> str:
    """The app whose active token ``token`` is, or ``""``."""
    if not token:
        return ""
    return _apps_by_hash(snapshot).get(hash_token(token), "")


def _blacklisted(peer: str, networks: tuple[str, ...]) -> bool:
    if not networks:
        return False
    host = peer.rsplit(":", 1)[0].strip("[]")
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return any(address in ipaddress.ip_network(n, strict=False) for n in networks)


def authorize(
    snapshot: CatalogSnapshot, mq: MqRef, token: str | None, peer: str, *, consume: bool
) -> str:
    """The app the request acts as (``""`` for none); raises :class:`Forbidden`."""
    app = app_of(snapshot, token)
    if mq.remote is not None:
        expected_hash = mq.remote.token_hash
        if expected_hash and not hmac.compare_digest(expected_hash, hash_token(token or "")):
            raise Forbidden
        return ""
    if mq.temp is not None:
        expected = mq.temp.token
        if expected and not hmac.compare_digest(expected.encode(), (token or "").encode()):
            raise Forbidden
        return ""
    topic = mq.topic
    assert topic is not None
    opened = not topic.zbus_token_hash or (
        bool(token) and hmac.compare_digest(hash_token(token or ""), topic.zbus_token_hash)
    )
    if app:
        info = snapshot.apps[app]
        policy = (
            snapshot.consumer(topic.code, app) if consume else snapshot.producer(topic.code, app)
        )
        if policy is None and not info.admin and not opened:
            raise Forbidden
        if policy is not None and _blacklisted(peer, tuple(policy.blacklist)):
            raise Forbidden
        return app
    if not opened:
        raise Forbidden
    return ""


def admin_allowed(configured: str, token: str | None) -> bool:
    """True when no admin token is configured or ``token`` equals it (constant time)."""
    if not configured:
        return True
    return hmac.compare_digest(configured.encode(), (token or "").encode())
