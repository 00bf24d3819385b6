"""Shared state of one VibeMQ endpoint (a TCP server or a web process's consumers)."""

from __future__ import annotations

import uuid
from collections import Counter
from dataclasses import dataclass, field

from brokers.engine import (
    CatalogSnapshot,
    CatalogWatcher,
    Engine,
    Presence,
    QueueSettings,
    dead_letter_parent,
    dead_letter_queue,
)
from brokers.servers.readahead import ReadAheadBudget
from brokers.servers.vibemq.config import ServerConfig
from brokers.servers.vibemq.limits import ConnectionGate

SUBSCRIBERS = "vibemq-subscribers"
"""The presence space of VibeMQ subscribers (a room per queue)."""


@dataclass(slots=True)
class ServerContext:
    """Everything a session needs besides itself."""

    engine: Engine
    watcher: CatalogWatcher
    config: ServerConfig
    broker_id: int | None = None
    node: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    counters: Counter[str] = field(default_factory=Counter)
    read_ahead: ReadAheadBudget = field(default_factory=ReadAheadBudget.from_environment)
    """What the dispatchers may keep leased ahead (shared by a process's servers)."""
    registry: Presence = field(init=False)
    """Subscribers of every process by queue, so queueInfo counts the whole cluster's."""
    gate: ConnectionGate = field(init=False)

    def __post_init__(self) -> None:
        self.registry = self.engine.presence(SUBSCRIBERS, self.node, self.config.registry_ttl_ms)
        self.gate = ConnectionGate(self.config.max_connections, self.config.connections_per_ip)

    @property
    def snapshot(self) -> CatalogSnapshot:
        """The current catalog snapshot."""
        return self.watcher.current

    def queue_settings(self, queue: str) -> QueueSettings | None:
        """The settings of an existing queue, None if there is none.

        A queue's DLQ (``<queue>.dlq``, or the name its settings give) exists as soon as
        the queue has its DLQ on, even before the catalog has a row for it (the engine
        creates it on first use with the defaults).
        """
        info = self.snapshot.topics.get(queue)
        if info is not None:
            return info.queue
        parent = dead_letter_parent(self.snapshot, queue)
        if parent is not None and parent.queue.dead_letter_enabled:
            return QueueSettings()
        return None

    def anonymous_app(self, queue: str) -> str:
        """The app a connection without an app token acts as on ``queue`` (the anonymous
        app of the queue's team; of the queue's own queue for an implicit DLQ), or ""."""
        info = self.snapshot.topics.get(queue)
        if info is None:
            info = dead_letter_parent(self.snapshot, queue)
        return info.anonymous_app if info is not None else ""

    def queue_names(self) -> list[str]:
        """Every queue, DLQs included, sorted by name."""
        names = set(self.snapshot.topics)
        names.update(
            dead_letter_queue(info)
            for info in self.snapshot.topics.values()
            if info.queue.dead_letter_enabled
        )
        return sorted(names)
