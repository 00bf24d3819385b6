"""Shared state of one zbus server: engine, catalog, settings and the live MQ runtimes."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any

from brokers.engine import CatalogSnapshot, CatalogWatcher, Engine
from brokers.servers.readahead import ReadAheadBudget
from brokers.servers.zbus.config import ZbusConfig

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
    # The live MQs of this server, owned and typed by their modules (.queue, .pubsub,
    # .temp, .relay, .track); held here as Any so that this module imports none of them.
    queues: dict[str, Any] = field(default_factory=dict)
    pubsubs: dict[str, Any] = field(default_factory=dict)
    temps: dict[str, Any] = field(default_factory=dict)
    activity: dict[str, dict[Any, float]] = field(default_factory=dict)
    """MQ → connection → monotonic time of its last consume (§13.5 consumer counts)."""
    track_subscribers: dict[Any, Any] = field(default_factory=dict)
    background: set[asyncio.Task[Any]] = field(default_factory=set)
    started_ms: int = 0
    relay: Any = None
    """Temp MQ registry and reply forwarding between brokers (None: this broker only)."""
    census: Any = None
    """The broker's other processes, asked for their consumers (None: this process only)."""
    read_ahead: ReadAheadBudget = field(default_factory=ReadAheadBudget.from_environment)
    """What the MQ pumps may keep leased ahead (shared by a process's servers)."""

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

    def consumed(self, mq: str, conn: Any, now: float | None = None) -> None:
        """Record that connection ``conn`` consumed ``mq`` ``now`` (monotonic time); the
        record goes when the connection closes (clients that come and go must not grow
        the server)."""
        seen = self.activity.get(mq)
        if seen is None:
            seen = self.activity[mq] = {}
        if conn not in seen:
            conn.on_close(lambda: self._left(mq, conn))
        seen[conn] = time.monotonic() if now is None else now

    def _left(self, mq: str, conn: Any) -> None:
        seen = self.activity.get(mq)
        if seen is not None:
            seen.pop(conn, None)
            if not seen:
                del self.activity[mq]
