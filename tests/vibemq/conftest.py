"""VibeMQ fixtures: a catalog in PostgreSQL published to Redis, in-process VibeMQ servers
for brokers 1 and 2 on free loopback ports (fast timers), and clients."""

from __future__ import annotations

import contextlib
import struct
from collections.abc import AsyncIterator
from dataclasses import dataclass

import msgspec
import pytest
import redis
import redis.asyncio as aioredis
from django.db import connection

from brokers.catalog_loader import publish
from brokers.clients.vibemq import VibeMQClient
from brokers.engine import CatalogWatcher, Engine, QueueRetry
from brokers.models import ConsumerPolicy, Team
from brokers.servers.readahead import ReadAheadBudget
from brokers.servers.vibemq import ServerConfig, start_vibemq_server
from tests import factories

FAST = ServerConfig(
    ack_timeout_ms=400,
    timer_interval=0.1,
    retry_margin_ms=300,
    shutdown_grace=2.0,
)


@dataclass
class Catalog:
    token: str
    other_team_token: str
    admin_token: str


def pause_consumers(queue: str, paused: bool) -> None:
    """Pause (or resume) every consumer policy of ``queue`` and publish the catalog (from a
    worker thread: ``sync_to_async(pause_consumers)(…)``)."""
    try:
        ConsumerPolicy.objects.filter(topic__code=queue).update(paused=paused)
        publish()
    finally:
        connection.close()  # a worker thread: its connection goes with it


@pytest.fixture
def catalog(transactional_db, redis_url: str) -> Catalog:
    """Two brokers, apps of two teams (one admin); no topics yet."""
    redis.Redis.from_url(redis_url).flushall()
    team = Team.objects.create(name="team1")
    other = Team.objects.create(name="team2")
    factories.cluster_with_brokers(brokers=2)
    _, token = factories.app("app1", team)
    _, other_token = factories.app("app2", other)
    admin, admin_token = factories.app("root", team)
    admin.is_admin = True
    admin.save()
    publish()
    return Catalog(token, other_token, admin_token)


class Broker:
    """An in-process broker: engine + watcher + VibeMQ server."""

    def __init__(self, broker_id: int, redis_url: str) -> None:
        self.broker_id, self.redis_url = broker_id, redis_url

    async def start(
        self, config: ServerConfig = FAST, port: int = 0, read_ahead: ReadAheadBudget | None = None
    ) -> None:
        self.redis = aioredis.from_url(self.redis_url)
        self.watcher = CatalogWatcher(self.redis, resync_interval=0.5)
        await self.watcher.start()
        self.engine = Engine(
            self.redis,
            lambda: self.watcher.current,
            broker_id=self.broker_id,
            queue_retry=QueueRetry(base_ms=100, cap_ms=400),
        )
        self.server = await start_vibemq_server(
            self.engine,
            self.watcher,
            "127.0.0.1",
            port,
            self.broker_id,
            config=config,
            read_ahead=read_ahead,
        )
        self.port = self.server.port

    async def stop(self, grace: float = 0.5) -> None:
        await self.server.stop(grace=grace)
        await self.engine.close()
        await self.watcher.stop()
        await self.redis.aclose()


@pytest.fixture
async def broker(catalog: Catalog, redis_url: str) -> AsyncIterator[Broker]:
    b = Broker(1, redis_url)
    await b.start()
    try:
        yield b
    finally:
        await b.stop()


@pytest.fixture
async def broker2(catalog: Catalog, redis_url: str) -> AsyncIterator[Broker]:
    b = Broker(2, redis_url)
    await b.start()
    try:
        yield b
    finally:
        await b.stop()


@pytest.fixture
async def clients(broker: Broker, catalog: Catalog):
    """``await clients()`` opens an authenticated client (closed after the test)."""
    opened: list[VibeMQClient] = []

    async def open_client(
        token: str | None = catalog.token, port: int | None = None, connect: bool = True
    ) -> VibeMQClient:
        c = await VibeMQClient.open("127.0.0.1", port or broker.port, token, connect=connect)
        opened.append(c)
        return c

    yield open_client
    for c in opened:
        await c.close()


def frame(obj: dict) -> bytes:
    """A raw TCP frame of a JSON object."""
    body = msgspec.json.encode(obj)
    return struct.pack(">I", len(body)) + body


class Raw:
    """A raw socket speaking length-prefixed JSON, for byte-level tests."""

    def __init__(self, reader, writer) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, port: int) -> Raw:
        import asyncio

        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        return cls(reader, writer)

    def send(self, obj: dict | bytes) -> None:
        self.writer.write(obj if isinstance(obj, bytes) else frame(obj))

    async def recv(self, wait: float = 5.0) -> dict:
        import asyncio

        head = await asyncio.wait_for(self.reader.readexactly(4), wait)
        (n,) = struct.unpack(">I", head)
        return msgspec.json.decode(await asyncio.wait_for(self.reader.readexactly(n), wait))

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(OSError):
            await self.writer.wait_closed()


@pytest.fixture
async def raw(broker: Broker):
    opened: list[Raw] = []

    async def open_raw(port: int | None = None) -> Raw:
        r = await Raw.open(port or broker.port)
        opened.append(r)
        return r

    yield open_raw
    for r in opened:
        await r.close()


# Chromium, its pages and the live daphne of the browser suite.
from tests.browser.conftest import browser, console_url, page  # noqa: E402

__all__ = ["browser", "console_url", "page"]
