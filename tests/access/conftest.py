"""The "who may do what" acceptance matrix (DESIGN.md): one catalog, every front-end.

Each test gets a fresh catalog (PostgreSQL rows, published to the session's flushed Redis):

* team ``owners<n>`` owns topic ``acc<n>`` (1 partition led by broker 1, a console topic: it is
  *closed* to token-less zbus clients although the team has an anonymous app) and topic
  ``open<n>`` (opened to token-less clients with :func:`brokers.anonymous.open_topic`);
* app ``owner<n>`` (team owners) has a producer and a consumer policy on ``acc<n>``, both
  HTTP-enabled, the consumer starting at the earliest message;
* app ``stranger<n>`` of another team has a valid token and policies on its own team's topic
  ``theirs<n>`` — none on ``acc<n>``;
* app ``marker<n>`` exists only to tell when a serving process has seen a catalog version:
  every change below ends with a new marker token, and a process that knows that token
  knows everything published before it.

Policies are changed through the models (the signals publish the catalog), then the test
waits — a bounded poll — until the server under test knows the new marker token.
:class:`Store` reads what is stored through an engine of its own on the same Redis, so every
refusal is checked against the store, not only against the wire answer.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import redis
import redis.asyncio as aioredis
import websockets
from asgiref.sync import sync_to_async
from django.db import connection, transaction

from brokers.anonymous import open_topic
from brokers.catalog_loader import publish
from brokers.engine import CatalogWatcher, Engine
from brokers.models import (
    App,
    Broker,
    ConsumerPolicy,
    PartitionGroup,
    ProducerPolicy,
    Team,
    Topic,
)
from tests import factories
from tests.scripts_path import free_port

_numbers = itertools.count(1)

LOOPBACK_HOST = "127.0.0.1/32"
LOOPBACK_NET = "127.0.0.0/8"
WRONG_TOKEN = "not-a-token-of-anyone-0123456789"


@dataclass
class Catalog:
    """Names and tokens of one test's catalog."""

    n: int
    topic: str
    open_topic: str
    their_topic: str
    owner: str
    owner_token: str
    stranger: str
    stranger_token: str
    marker: str
    marker_token: str
    jmq4_port: int

    @property
    def producer(self) -> str:
        """The owner's producer (policy) name: HTTP-MQ ``producer``."""
        return f"{self.owner}.{self.topic}"

    @property
    def consumer(self) -> str:
        """The owner's consumer group (policy) name: HTTP-MQ ``consumer``."""
        return f"{self.owner}.{self.topic}"


def build_catalog(redis_url: str) -> Catalog:
    """Flush Redis, create the catalog described in the module docstring, publish it."""
    redis.Redis.from_url(redis_url).flushall()
    n = next(_numbers)
    with transaction.atomic():
        owners = Team.objects.create(name=f"owners{n}")
        strangers = Team.objects.create(name=f"strangers{n}")
        cluster = factories.cluster_with_brokers(f"acc-cluster{n}", brokers=1)
        jmq4_port = free_port()
        Broker.objects.filter(id=1).update(
            jmq4_port=jmq4_port, zbus_port=free_port(), vibemq_port=free_port()
        )
        topic = factories.topic(f"acc{n}", cluster, owners, partitions=1, groups=1)
        opened = factories.topic(f"open{n}", cluster, owners, partitions=1, groups=1)
        theirs = factories.topic(f"theirs{n}", cluster, strangers, partitions=1, groups=1)
        PartitionGroup.objects.filter(topic__in=[topic, opened, theirs]).update(leader_id=1)
        owner, owner_token = factories.app(f"owner{n}", owners)
        ProducerPolicy.objects.create(topic=topic, app=owner, http_enabled=True)
        ConsumerPolicy.objects.create(
            topic=topic,
            app=owner,
            http_enabled=True,
            start_position="earliest",
            ack_timeout_ms=30_000,
            batch_size=10,
        )
        stranger, stranger_token = factories.app(f"stranger{n}", strangers)
        ProducerPolicy.objects.create(topic=theirs, app=stranger, http_enabled=True)
        ConsumerPolicy.objects.create(
            topic=theirs, app=stranger, http_enabled=True, start_position="earliest"
        )
        open_topic(opened)
        marker, marker_token = factories.app(f"marker{n}", owners)
    publish()
    return Catalog(
        n=n,
        topic=topic.code,
        open_topic=opened.code,
        their_topic=theirs.code,
        owner=owner.code,
        owner_token=owner_token,
        stranger=stranger.code,
        stranger_token=stranger_token,
        marker=marker.code,
        marker_token=marker_token,
        jmq4_port=jmq4_port,
    )


@pytest.fixture
def catalog(transactional_db, redis_url: str) -> Catalog:
    """A fresh catalog on the session's flushed Redis (committed rows: signals publish)."""
    return build_catalog(redis_url)


# ---------------------------------------------------------------------- waiting


async def until(
    predicate: Callable[[], Any],
    *,
    within: float = 5.0,
    what: str | Callable[[], object] = "",
) -> Any:
    """Poll ``predicate`` (sync or async) every 20 ms until it is truthy; fail after
    ``within`` seconds, saying ``what`` was awaited (called then, when it is callable:
    the state at the time out)."""
    deadline = time.monotonic() + within
    while True:
        value = predicate()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            shown = what() if callable(what) else what or predicate
            raise AssertionError(f"timed out after {within} s waiting for {shown}")
        await asyncio.sleep(0.02)


Seen = Callable[[str], Awaitable[None]]
"""Waits until the serving process knows an app token (so it has that catalog version)."""


def seen_by(watcher: CatalogWatcher) -> Seen:
    """:data:`Seen` for an in-process server's catalog watcher."""

    async def seen(token: str) -> None:
        await until(
            lambda: watcher.current.app_for_token(token) is not None,
            what="the server's catalog watcher to see the change",
        )

    return seen


# ---------------------------------------------------------------------- policy changes


def _apply(
    catalog: Catalog, producer: dict[str, Any], consumer: dict[str, Any], topic: dict[str, Any]
) -> str:
    try:
        if topic:
            row = Topic.objects.get(code=catalog.topic)
            for key, value in topic.items():
                setattr(row, key, value)
            row.full_clean()
            row.save()  # the post_save signal publishes the catalog
        if producer:
            policy = ProducerPolicy.objects.get(topic__code=catalog.topic, app__code=catalog.owner)
            for key, value in producer.items():
                setattr(policy, key, value)
            policy.full_clean()
            policy.save()  # the post_save signal publishes the catalog
        if consumer:
            policy = ConsumerPolicy.objects.get(topic__code=catalog.topic, app__code=catalog.owner)
            for key, value in consumer.items():
                setattr(policy, key, value)
            policy.full_clean()
            policy.save()
        return App.objects.get(code=catalog.marker).issue_token()
    finally:
        connection.close()  # this ran in an executor thread with its own connection


LIMITS = pytest.mark.parametrize(
    "limit",
    [{"producer": {"rate_limit": 2}}, {"topic": {"send_limit": 2}}],
    ids=["producer-rate-limit", "topic-send-limit"],
)
"""A producer's own rate limit, and its topic's send limit (all producers together)."""


async def change(
    catalog: Catalog,
    seen: Seen,
    *,
    producer: dict[str, Any] | None = None,
    consumer: dict[str, Any] | None = None,
    topic: dict[str, Any] | None = None,
) -> None:
    """Change the owner's producer and/or consumer policy on the topic, and/or the topic,
    through the models and wait until the server under test has the new catalog."""
    marker = await sync_to_async(_apply)(catalog, producer or {}, consumer or {}, topic or {})
    await seen(marker)


def _rotate_owner_token(catalog: Catalog) -> str:
    try:
        catalog.owner_token = App.objects.get(code=catalog.owner).issue_token()
        return App.objects.get(code=catalog.marker).issue_token()
    finally:
        connection.close()  # this ran in an executor thread with its own connection


async def rotate_owner_token(catalog: Catalog, seen: Seen) -> None:
    """Rotate the owner's app token (the old one revoked, as the console's rotate does),
    ``catalog.owner_token`` becoming the new one, and wait until the server under test
    has the change."""
    await seen(await sync_to_async(_rotate_owner_token)(catalog))


# ---------------------------------------------------------------------- the store


@dataclass(frozen=True)
class StoreState:
    """What is stored for a topic: partition bounds (log), queue counts, delayed."""

    bounds: tuple[tuple[int, int], ...]
    queue: tuple[int, int, int, int, int]  # ready, in flight, delayed, dead pending, dropped
    delayed: int

    @property
    def log_count(self) -> int:
        """Messages in the partitions' logs."""
        return sum(hi - lo for lo, hi in self.bounds)


class Store:
    """An engine of the test's own on the session's Redis, to look at the store."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    async def state(self, topic: str) -> StoreState:
        info = self.engine.topic(topic)
        bounds = tuple([await self.engine.bounds(topic, p) for p in range(info.partitions)])
        q = await self.engine.queue_stats(topic)
        return StoreState(
            bounds,
            (q.ready, q.in_flight, q.retrying, q.backlog, q.dropped),
            await self.engine.delayed_pending(topic),
        )

    async def progress(self, topic: str, app: str) -> tuple[tuple[int, str, int], ...]:
        """Per partition: the consumer's ack index, lock owner and out-of-order acks."""
        rows = await self.engine.progress(topic, app)
        return tuple((r.ack_index, r.lock_owner, r.pending_acks) for r in rows)

    async def bodies(self, topic: str) -> list[bytes]:
        """Bodies of every message in the topic's logs, in index order."""
        out: list[bytes] = []
        info = self.engine.topic(topic)
        for p in range(info.partitions):
            lo, hi = await self.engine.bounds(topic, p)
            if hi > lo:
                out.extend(d.message.body for d in await self.engine.read(topic, p, lo, hi - lo))
        return out


@pytest.fixture
async def store(catalog: Catalog, redis_url: str) -> AsyncIterator[Store]:
    client = aioredis.from_url(redis_url)
    watcher = CatalogWatcher(client, resync_interval=0.5)
    await watcher.start()
    engine = Engine(client, lambda: watcher.current)
    try:
        yield Store(engine)
    finally:
        await engine.close()
        await watcher.stop()
        await client.aclose()


# ---------------------------------------------------------------------- the web process


@pytest.fixture(scope="session")
def web_url(django_db_setup, tmp_path_factory) -> Iterator[str]:
    """One live daphne (VibeMQ over WebSocket) on the session's test database and Redis;
    its output goes to web.log in the session's temp dir."""
    from tests.httpmq.conftest import start_daphne, stop
    from tests.redis_fixtures import require_test_session

    require_test_session()
    port = free_port()
    proc = start_daphne(port, tmp_path_factory.mktemp("access-web") / "web.log")
    yield f"http://127.0.0.1:{port}"
    stop(proc)


def seen_by_websocket(ws_url: str) -> Seen:
    """:data:`Seen` for the web process's VibeMQ over WebSocket: ``connect`` with the
    token is refused while the token is unknown there and acknowledged once it is known."""

    async def seen(token: str) -> None:
        async def known() -> bool:
            async with websockets.connect(ws_url, subprotocols=["vibemq"]) as ws:
                frame = {"id": "seen", "type": "connect", "headers": {"authToken": token}}
                await ws.send(json.dumps(frame))
                return json.loads(await asyncio.wait_for(ws.recv(), 5))["type"] == "connectAck"

        await until(known, what="the web process to see the catalog change")

    return seen


# ---------------------------------------------------------------------- the HTTP-MQ service


@pytest.fixture(scope="session")
def mq_url(django_db_setup, tmp_path_factory) -> Iterator[str]:
    """One live HTTP-MQ service (``manage.py runproxy``) on the session's Redis; its
    output goes to proxy.log in the session's temp dir."""
    from tests.httpmq.conftest import start_proxy, stop
    from tests.redis_fixtures import require_test_session

    require_test_session()
    port = free_port()
    proc = start_proxy(port, tmp_path_factory.mktemp("access-mq") / "proxy.log")
    yield f"http://127.0.0.1:{port}"
    stop(proc)


@pytest.fixture
async def mq(mq_url: str) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=mq_url, timeout=10) as client:
        yield client


def seen_by_mq(mq: httpx.AsyncClient, catalog: Catalog) -> Seen:
    """:data:`Seen` for the HTTP-MQ service: a fetch with the token answers 401 while the
    token is unknown there and 403 (the token's app does not own the owner's consumer)
    once it is known; neither reads nor locks anything."""

    async def seen(token: str) -> None:
        async def known() -> bool:
            r = await mq.get(
                "/mq/message",
                params={"topic": catalog.topic, "consumer": catalog.consumer},
                headers={"Authorization": f"Bearer {token}"},
            )
            return r.status_code == 403

        await until(known, what="the HTTP-MQ service to see the catalog change")

    return seen


@pytest.fixture
async def mq_seen(mq: httpx.AsyncClient, catalog: Catalog) -> Seen:
    """:data:`Seen` for the HTTP-MQ service, after it has this test's catalog."""
    seen = seen_by_mq(mq, catalog)
    await seen(catalog.marker_token)
    return seen
