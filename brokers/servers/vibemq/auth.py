"""``connect`` authentication (vibemq.md §5, §14): an mqcloud app token names the app.

Tokens are looked up by their SHA-256 (what the catalog stores), so the secret itself is
never compared byte by byte; the stored hash is then checked with ``compare_digest``.
"""

from __future__ import annotations

import hmac

from brokers.engine import AppInfo, CatalogSnapshot
from brokers.engine.catalog import hash_token


class TokenIndex:
    """Token hash → app for the newest snapshot it was asked about."""

    def __init__(self) -> None:
        self._snapshot: CatalogSnapshot | None = None
        self._index: dict[str, AppInfo] = {}

    def app_for_token(self, snapshot: CatalogSnapshot, token: str) -> AppInfo | None:
        """The app whose active token is ``token``, or None."""
        if snapshot is not self._snapshot:
            self._index = {h: app for app in snapshot.apps.values() for h in app.token_hashes}
            self._snapshot = snapshot
        digest = hash_token(token)
        app = self._index.get(digest)
        if app is None or not any(hmac.compare_digest(h, digest) for h in app.token_hashes):
            return None
        return app
