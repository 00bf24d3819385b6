"""Shared state of one zbus server: engine, catalog, settings and the live MQ runtimes."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from brokers.engine import CatalogSnapshot, CatalogWatcher, Engine
from brokers.servers.zbus.config import ZbusConfig

if TYPE_CHECKING:
    from brokers.servers.zbus.connection import Connection
    from brokers.servers.zbus.pubsub import PubSubMq
    from brokers.servers.zbus.queue import QueueMq
    from brokers.servers.zbus.relay import Relay
    from brokers.servers.zbus.temp import TempMq

log = logging.getLogger("mqcloud.zbus")


@dataclass(slots=True)
class ServerContext:
    """Everything a command handler needs besides its connection and message."""

    engine: Engine
    watcher: CatalogWatcher
    broker_id: int
    address: str
    """The broker's advertised ``host:port`` (§5 ``broker`` header)."""
    config: ZbusConfig = field(default_factory=ZbusConfig)
    queues: dict[str, QueueMq] = field(default_factory=dict)
    pubsubs: dict[str, PubSubMq] = field(default_factory=dict)
    temps: dict[str, TempMq] = field(default_factory=dict)
    activity: dict[str, dict[Connection, float]] = field(default_factory=dict)
    """MQ → connection → monotonic time of its last consume (§13.5 consumer counts)."""
    track_subscribers: dict[Connection, Any] = field(default_factory=dict)
    background: set[asyncio.Task[Any]] = field(default_factory=set)
    started_ms: int = 0
    relay: Relay | None = None
    """Temp MQ registry and reply forwarding between brokers (None: this broker only)."""

    @property
    def snapshot(self) -> CatalogSnapshot:
        """The current catalog snapshot."""
        return self.watcher.current

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]:
        """Run ``coro`` in the background; failures are logged, the task is kept until done."""
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self.background.add(task)
        task.add_done_callback(self._finished)
        return task

    def _finished(self, task: asyncio.Task[Any]) -> None:
        self.background.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("zbus background task %s failed", task.get_name(), exc_info=task.exception())

    def consumed(self, mq: str, conn: Connection) -> None:
        """Record that ``conn`` consumed ``mq`` now."""
        self.activity.setdefault(mq, {})[conn] = conn.now()
