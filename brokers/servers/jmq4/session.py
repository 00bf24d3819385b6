"""Per-connection session state and the authorization rules of spec §6.1."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

from brokers.engine import CatalogSnapshot, Credential
from brokers.protocols.jmq4 import Code, validate_name
from brokers.servers.jmq4.errors import Reject
from brokers.servers.jmq4.sendtime import SendTimeBaseline

_counter = itertools.count(1)


@dataclass(slots=True)
class Session:
    """What one TCP connection established: identity, registrations and held locks."""

    peer_host: str
    peer_port: int
    connection_id: str = ""
    app: str = ""
    region: str = ""
    consumers: dict[tuple[str, str], str] = field(default_factory=dict)
    producers: dict[tuple[str, str], str] = field(default_factory=dict)
    locks: dict[tuple[str, str, int], int] = field(default_factory=dict)
    """(topic, app, partition) → lock token of partitions fetched and not yet acked."""
    retries: dict[tuple[str, str], set[int]] = field(default_factory=dict)
    """(topic, app) → ids of retries fetched and not yet acked (partition 32767)."""
    send_times: SendTimeBaseline = field(default_factory=SendTimeBaseline)
    """Judges which requests waited past the request timeout (:mod:`.sendtime`)."""
    cut_short: set[tuple[str, str, str]] = field(default_factory=set)
    """(topic, app, owner) of FETCH_TOPIC_MESSAGE requests cancelled while they ran: one
    may have taken a lock in Redis whose token never came back, known only by its owner
    (the connection id)."""
    credential: Credential | None = None
    """The app token ADD_CONNECTION authenticated with, held while the connection lasts:
    rotating it in the console closes the connection (:mod:`brokers.engine.credentials`)."""
    close: Callable[[], None] = lambda: None
    """Closes the connection (set by the protocol)."""

    @property
    def established(self) -> bool:
        """True once ADD_CONNECTION succeeded."""
        return bool(self.connection_id)

    @property
    def address(self) -> str:
        """``host:port`` (``[v6]:port``) of the peer, as the engine records it."""
        if ":" in self.peer_host:
            return f"[{self.peer_host}]:{self.peer_port}"
        return f"{self.peer_host}:{self.peer_port}"

    def establish(self, app: str, region: str, broker_id: int) -> str:
        """Mark the connection established for ``app``; returns the connection id."""
        if not self.connection_id:
            self.connection_id = f"{broker_id}-{next(_counter)}-{self.peer_host}-{self.peer_port}"
            self.app, self.region = app, region
        return self.connection_id

    def release_credential(self) -> None:
        """Stop holding the app token (the connection is removed or closed)."""
        if self.credential is not None:
            self.credential.release()
            self.credential = None

    def reset(self) -> None:
        """Forget the connection (REMOVE_CONNECTION)."""
        self.release_credential()
        self.connection_id = self.app = self.region = ""
        self.consumers.clear()
        self.producers.clear()

    def authorize(self, app: str, snapshot: CatalogSnapshot) -> None:
        """Reject with 132 unless the connection is established and may act for ``app``
        (with 6 for a name no app can have, §8.5)."""
        if not self.established:
            raise Reject(Code.FW_CONNECTION_NOT_EXISTS, "connection not exists")
        if app == self.app:
            return
        if validate_name(app) is not None:
            raise Reject(Code.CN_PARAM_ERROR, "invalid app name")
        base, dot, _ = app.partition(".")
        if dot and base == self.app:
            return
        info = snapshot.apps.get(self.app)
        if info is not None and info.admin:
            return
        raise Reject(Code.FW_CONNECTION_NOT_EXISTS, f"connection not authorized for app {app}")
