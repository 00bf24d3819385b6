"""App tokens held by open connections, and the revocation of those the catalog dropped.

A front-end looks an app token up once, when a connection authenticates (JMQ4
ADD_CONNECTION, VibeMQ ``connect``) or starts consuming with it (a zbus consume), and then
acts for that app for as long as the connection lasts. Rotating the app's token in the
console must cut such connections off too, not only refuse the old token's next login: a
leaked token is otherwise good until its holder disconnects. So the front-end *holds*
the token here (:meth:`Credentials.hold`) with a callback that ends the connection in the
protocol's own way, and releases it when the connection closes; every catalog change
checks the held tokens of the apps whose token hashes changed (or that are gone) and calls
the callbacks of those no longer active. The rule lives here once for every protocol;
a server only says how it closes a connection.

Cost: nothing per message; per catalog change, one comparison per app that has held
tokens, and work only for an app whose tokens changed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from brokers.engine.catalog import AppInfo, CatalogSnapshot, CatalogWatcher, hash_token

log = logging.getLogger("mqcloud.engine")


class Credential:
    """One held token: the app it authenticated (``app``, its code; ``info``, the app as
    the catalog had it then), until :meth:`release`."""

    __slots__ = ("_digest", "_on_revoked", "_owner", "app", "info")

    def __init__(
        self, owner: Credentials, info: AppInfo, digest: str, on_revoked: Callable[[], None]
    ) -> None:
        self._owner = owner
        self.app = info.code
        self.info = info
        self._digest = digest
        self._on_revoked = on_revoked

    def release(self) -> None:
        """The connection closed (or authenticated again): stop watching this token."""
        self._owner._forget(self)


class Credentials:
    """The tokens this process's connections hold, per app."""

    def __init__(self, catalog: Callable[[], CatalogSnapshot]) -> None:
        self._catalog = catalog
        self._held: dict[str, dict[Credential, None]] = {}
        """App → its held credentials (a dict as an ordered set)."""
        self._hashes: dict[str, tuple[str, ...]] = {}
        """App → the token hashes its credentials were last checked against."""
        self._following: set[int] = set()

    def follow(self, watcher: CatalogWatcher) -> None:
        """Check the held tokens on every catalog change ``watcher`` announces (once per
        watcher, however many servers ask)."""
        if id(watcher) not in self._following:
            self._following.add(id(watcher))
            watcher.on_change(self.revoke_stale)

    def hold(
        self, token: str | None, on_revoked: Callable[[], None], *, app: str | None = None
    ) -> Credential | None:
        """Hold ``token`` for a connection: its credential (whose ``app`` it acts as), or
        None when no app has that token now (or, given ``app``, when that app has not:
        a client that names its app). ``on_revoked`` is called once, from the catalog
        change that drops the token (rotated, or its app deleted)."""
        info = self._catalog().app_for_token(token)
        if info is None or (app is not None and info.code != app):
            return None
        credential = Credential(self, info, hash_token(token or ""), on_revoked)
        self._held.setdefault(info.code, {})[credential] = None
        self._hashes.setdefault(info.code, info.token_hashes)
        return credential

    def held(self) -> int:
        """How many tokens are held (for the broker's report and tests)."""
        return sum(len(c) for c in self._held.values())

    def revoke_stale(self, snapshot: CatalogSnapshot) -> None:
        """Call back every held credential whose token ``snapshot`` no longer has."""
        for code in list(self._held):
            app = snapshot.apps.get(code)
            hashes = app.token_hashes if app is not None else ()
            if hashes == self._hashes.get(code):
                continue  # the common case: this app's tokens did not change
            self._hashes[code] = hashes
            stale = [c for c in self._held[code] if c._digest not in hashes]
            for credential in stale:
                self._forget(credential)
                try:
                    credential._on_revoked()
                except Exception:  # one connection's close must not spare the others
                    log.exception("closing a connection of app %s after its token went", code)
            if stale:
                log.info("app %s: %d connections closed, their token was revoked", code, len(stale))

    def _forget(self, credential: Credential) -> None:
        held = self._held.get(credential.app)
        if held is not None:
            held.pop(credential, None)
            if not held:
                del self._held[credential.app]
                self._hashes.pop(credential.app, None)
