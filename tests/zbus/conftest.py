"""zbus fixtures: a catalog with queue, token-guarded and pub/sub MQs published to Redis, an
in-process zbus server on a free loopback port, and a raw-socket helper."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass

import orjson
import pytest
import redis
import redis.asyncio as aioredis

from brokers.anonymous import open_topic
from brokers.catalog_loader import publish
from brokers.engine import CatalogWatcher, Engine
from brokers.models import Broker, ConsumerPolicy, ProducerPolicy, Team, Topic
from brokers.protocols.zbus import Decoder, Message
from brokers.servers.readahead import ReadAheadBudget
from brokers.servers.zbus import ZbusConfig, ZbusServer, start_zbus_server
from tests import factories

SECRET = "s3cret"


@dataclass
class Catalog:
    """What the catalog fixture created."""

    app_token: str
    stranger_token: str


def build_catalog(redis_url: str) -> Catalog:
    """Broker 1; MQs ``orders`` and ``svc`` (open queues), ``secure`` (open queue guarded by
    the token ``s3cret``), ``news`` (open pub/sub) — open as MQs made by ``create_mq`` are:
    token-less clients act as the team's anonymous app, which has policies on them; app
    ``app1`` produces and consumes ``secure``; app ``stranger`` has no policy anywhere."""
    redis.Redis.from_url(redis_url).flushall()
    team = Team.objects.create(name="team1")
    cluster = factories.cluster_with_brokers(brokers=1)
    Broker.objects.filter(id=1).update(zbus_port=15999)
    topics = {}
    for code, mode in (("orders", 1), ("svc", 1), ("secure", 1), ("news", 2)):
        topics[code] = factories.topic(code, cluster, team, partitions=1, groups=1)
        topics[code].zbus_mode = mode
        topics[code].creator = "10.0.0.1:1234"
        if code == "secure":
            topics[code].set_zbus_token(SECRET)
        topics[code].save()
    Topic.objects.filter(code__in=topics).update(max_queue_size=1_000_000)
    for topic in topics.values():
        open_topic(topic)
    app, token = factories.app("app1", team)
    ProducerPolicy.objects.create(topic=topics["secure"], app=app)
    ConsumerPolicy.objects.create(topic=topics["secure"], app=app)
    _, stranger = factories.app("stranger", team)
    publish()
    return Catalog(token, stranger)


@pytest.fixture
def catalog(transactional_db, redis_url: str) -> Catalog:
    """The test catalog, published to the session's flushed Redis."""
    return build_catalog(redis_url)


TEST_CONFIG = ZbusConfig(
    client_timeout_guess=1.0, reply_ttl=2.0, idle_recheck=1.0, shutdown_grace=1.0
)


class Broker_:
    """An in-process broker: engine + watcher + zbus server."""

    def __init__(self, redis_url: str) -> None:
        self.redis_url = redis_url

    async def start(
        self,
        config: ZbusConfig = TEST_CONFIG,
        read_ahead: ReadAheadBudget | None = None,
        *,
        port: int = 0,
        reuse_port: bool = False,
    ) -> ZbusServer:
        """Start on ``port`` (0: a free one); ``reuse_port``: share it with other
        servers of broker 1, as the processes of ``runbroker --processes`` do."""
        self.redis = aioredis.from_url(self.redis_url)
        self.watcher = CatalogWatcher(self.redis, resync_interval=0.5)
        await self.watcher.start()
        self.engine = Engine(self.redis, lambda: self.watcher.current, broker_id=1)
        self.server = await start_zbus_server(
            self.engine,
            self.watcher,
            "127.0.0.1",
            port,
            1,
            config=config,
            read_ahead=read_ahead,
            reuse_port=reuse_port,
        )
        self.port = self.server.port
        return self.server

    async def stop(self) -> None:
        await self.server.stop(grace=1.0)
        await self.engine.close()
        await self.watcher.stop()
        await self.redis.aclose()


@contextlib.asynccontextmanager
async def running_broker(redis_url: str) -> AsyncIterator[Broker_]:
    """A :class:`Broker_` started on ``redis_url``, stopped on exit."""
    b = Broker_(redis_url)
    await b.start()
    try:
        yield b
    finally:
        await b.stop()


@pytest.fixture
async def broker(catalog: Catalog, redis_url: str) -> AsyncIterator[Broker_]:
    """A zbus server for broker 1 on a free port."""
    async with running_broker(redis_url) as b:
        yield b


class Raw:
    """A raw socket speaking bytes; replies decoded with the codec."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.decoder = Decoder()
        self.pending: list[Message] = []

    @classmethod
    async def open(cls, port: int) -> Raw:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        return cls(reader, writer)

    async def send(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def recv(self, wait: float = 5.0) -> Message:
        """The next message from the broker."""
        async with asyncio.timeout(wait):
            while not self.pending:
                data = await self.reader.read(65536)
                if not data:
                    raise ConnectionError("closed by the broker")
                self.pending.extend(e for e in self.decoder.feed(data) if isinstance(e, Message))
        return self.pending.pop(0)

    async def recv_raw(self, wait: float = 5.0) -> bytes:
        """Bytes as they arrive (for byte-exact checks)."""
        async with asyncio.timeout(wait):
            return await self.reader.read(65536)

    async def silent(self, wait: float = 0.3) -> bool:
        """True if nothing arrives within ``wait`` seconds."""
        try:
            await self.recv(wait)
        except TimeoutError:
            return True
        return False

    async def closed_by_peer(self, wait: float = 5.0) -> bool:
        """True once the broker closed the connection (after any pending bytes)."""
        async with asyncio.timeout(wait):
            while await self.reader.read(65536):
                pass
        return True

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(ConnectionError, OSError):
            await self.writer.wait_closed()


def msg(*lines: str, body: bytes = b"", start: str = "GET / HTTP/1.1") -> bytes:
    """A message as a 2015 client writes it: start line, ``key: value`` lines, body."""
    head = [start, *lines]
    if body:
        head.append(f"content-length: {len(body)}")
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


async def create_temp_mq(owner: Raw, name: str, token: str = "") -> None:
    """``create_mq`` of Temp MQ ``name`` (mode 5) by ``owner``, with an access token if
    given; asserts the broker answered 200."""
    body = {"mqName": name, "mqMode": 5} | ({"accessToken": token} if token else {})
    await owner.send(msg("cmd: admin", "sub_cmd: create_mq", "msgid: t", body=orjson.dumps(body)))
    assert (await owner.recv()).status == 200


@pytest.fixture
async def raw(broker: Broker_) -> AsyncIterator[Raw]:
    """A raw connection to the broker."""
    conn = await Raw.open(broker.port)
    try:
        yield conn
    finally:
        await conn.close()
