"""Who may do what, for front-ends that refuse early: the gate's checks and the one token
lookup (every produce and consume operation asks the gate itself).

A section of the :class:`~brokers.engine.engine.Engine` facade (a mixin on its shared state).
"""

from __future__ import annotations

from brokers.engine.sections.base import EngineBase


class AccessSection(EngineBase):
    """Who may do what, for front-ends that refuse early."""

    def authorize_producer(self, topic: str, app: str, address: str | None = None) -> None:
        """Refuse (AccessDenied, TopicNotFound) unless ``app`` may produce to ``topic``
        from ``address`` (None: the address is not checked, as for a registration).
        Every produce method checks this itself; front-ends call it to refuse early."""
        self.gate.producer(topic, app, address)

    def authorize_consumer(self, topic: str, app: str, address: str | None = None) -> bool:
        """Refuse (AccessDenied, TopicNotFound) unless ``app`` may consume ``topic`` from
        ``address``; False while the consumer is paused (it may subscribe, and gets
        nothing until it is resumed). Every consume method checks this itself."""
        return not self.gate.consumer(topic, app, address).paused

    def consumer_terms(self, topic: str, app: str) -> tuple[object, ...]:
        """What the catalog says about ``app`` consuming ``topic`` (the entries its gate
        and its leases read), comparable across catalog versions: a front-end that leases
        on a consumer's behalf looks again after a catalog change only when these differ
        (a change elsewhere in a fleet's catalog does not concern it)."""
        return self.gate.consumer_terms(topic, app)

    def is_broadcast(self, topic: str, app: str) -> bool:
        """Whether ``app`` consumes ``topic`` by broadcast (each client its own progress)."""
        info = self.topic(topic)
        policy = self._consumer(topic, app)
        return self._by_broadcast(info, policy)

    def app_for_token(self, token: str | None) -> str | None:
        """The app whose active token ``token`` is (the catalog's one lookup), or None."""
        app = self._catalog().app_for_token(token)
        return app.code if app is not None else None
