"""Shared state of one JMQ4 server: the engine, the catalog and settings."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from brokers.engine import CatalogSnapshot, Engine
from brokers.protocols.jmq4 import DEFAULT_MAX_FRAME_SIZE
from brokers.servers.jmq4.parking import MAX_PARKED, LongPollSlots


@dataclass(frozen=True, slots=True)
class ServerConfig:
    """Tunables of a JMQ4 server (all have production defaults)."""

    max_frame_size: int = DEFAULT_MAX_FRAME_SIZE
    max_inflight: int = 128
    """Requests handled concurrently per connection; reading pauses beyond it."""
    max_held_bytes: int = 2 * DEFAULT_MAX_FRAME_SIZE
    """Request bytes those may hold together; reading pauses beyond it (a connection so
    holds at most this + one frame + one read)."""
    produce_timeout: float = 3.0
    """A multi-topic produce reports topics unfinished after this many seconds as 108."""
    shutdown_grace: float = 5.0
    """How long a graceful stop waits for in-flight requests (long polls included)."""
    max_long_poll_ms: int = 60_000
    max_parked: int = MAX_PARKED
    """Long polls waiting at once in this process (jmq4.md §6.2: 10,000); per (topic, app)
    the limit is the topic's partitions this broker leads."""
    request_timeout_ms: int = 30_000
    """A request whose header sendTime is older than this is refused with code 22 (request
    timeout) and not executed: its client has given up on it (a broker that was paused
    must not act on what waited in its socket). "Older" is measured against the
    connection's own recent requests, so a client clock behind ours is no reason
    (:mod:`.sendtime`). 0 turns the check off; a sendTime ≤ 0 (a client that does not
    stamp its requests) is never refused."""


@dataclass(slots=True)
class ServerContext:
    """Everything a command handler needs besides its session and request."""

    engine: Engine
    catalog: Callable[[], CatalogSnapshot]
    broker_id: int
    config: ServerConfig = field(default_factory=ServerConfig)
    cleanups: set[asyncio.Task[None]] = field(default_factory=set)
    """Work left by closed connections (lock releases); a graceful stop waits for it."""
    long_polls: LongPollSlots = field(init=False)
    """The FETCH_TOPIC_MESSAGE long polls waiting now (:mod:`.parking`)."""

    def __post_init__(self) -> None:
        self.long_polls = LongPollSlots(self.config.max_parked)

    def clean_up(self, work: Coroutine[Any, Any, None]) -> None:
        """Run ``work`` after a connection is gone, kept until it ends."""
        task = asyncio.get_running_loop().create_task(work)
        self.cleanups.add(task)
        task.add_done_callback(self.cleanups.discard)

    @property
    def snapshot(self) -> CatalogSnapshot:
        """The current catalog snapshot."""
        return self.catalog()
