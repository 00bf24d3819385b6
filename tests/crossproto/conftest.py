"""The world of the cross-protocol matrix: one catalog, every front-end, real sockets.

Built once for the package (the tests only read it), on the session's PostgreSQL and Redis:

* team ``crossproto`` with one broker (id 1, leader of everything) and one topic per
  ordered (producer, consumer) pair of protocols, ``x.<producer>.<consumer>``: 1 partition,
  a console topic with the defaults (RoundRobin, zbus mode MQ) — one topic per pair, so the
  pairs share no message, group or count;
* app ``xowner`` with an HTTP-enabled producer policy and an HTTP-enabled consumer policy
  (``earliest``, ack timeout 30 s, batch size 10) on every topic: the one consumer group
  every protocol consumes through;
* app ``xmarker`` (no policy) to tell when the web process has the catalog;
* user ``xoperator``, a member of the team, whose REST API token reads progress (HTTP-MQ
  progress endpoint and the console API) and who is logged in to the console;
* topics ``x.edge.<case>`` for :mod:`.test_edges`, made like the pairs' topics.

In process, on the package's event loop: a JMQ4 server, a zbus server and a VibeMQ TCP
server for broker 1, each with its own engine and catalog watcher, and a look-at-the-store
engine; out of process: one daphne (HTTP-MQ and ``/ws/vibemq``) from
:mod:`tests.access.conftest`. The rows are committed (the web process reads them) and
flushed when the package is done, as a transactional test would.
"""

from __future__ import annotations

import os
import re
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field

import httpx
import pytest
import pytest_asyncio
import redis
import redis.asyncio as aioredis
from django.core.management import call_command
from django.db import connection, transaction

from brokers.catalog_loader import publish
from brokers.engine import CatalogWatcher, Engine
from brokers.models import Broker, ConsumerPolicy, PartitionGroup, ProducerPolicy, Team, Topic
from brokers.servers.jmq4 import ServerConfig as Jmq4Config
from brokers.servers.vibemq import ServerConfig as VibeConfig
from brokers.servers.zbus import ZbusConfig
from tests import factories
from tests.access.conftest import until, web_url
from tests.jmq4.conftest import Broker_ as Jmq4Broker
from tests.redis_fixtures import require_test_session
from tests.scripts_path import free_port
from tests.vibemq.conftest import Broker as VibeBroker
from tests.zbus.conftest import Broker_ as ZbusBroker

__all__ = ["web_url"]  # the session's daphne, shared with tests/access

PROTOCOLS = ("jmq4", "zbus", "vibemq-tcp", "vibemq-ws", "httpmq")
PAIRS = tuple((p, c) for p in PROTOCOLS for c in PROTOCOLS if p != c)
EDGES = tuple(
    [f"batch.{c}" for c in ("zbus", "vibemq-tcp", "vibemq-ws", "httpmq")]
    + [f"compressed.{c}" for c in ("zbus", "vibemq-tcp", "vibemq-ws", "httpmq")]
    + [f"handover.{a}.{b}" for a in ("zbus", "vibemq-tcp") for b in ("jmq4", "httpmq")]
    + ["empty-payload", "newline", "same-ids", "max-size"]
    + [f"priority.{c}" for c in ("zbus", "vibemq-tcp")]
    + [f"retried.{c}" for c in ("zbus", "vibemq-tcp", "vibemq-ws")]
    + [f"zbus-name.{c}" for c in ("jmq4", "zbus", "vibemq-tcp", "vibemq-ws", "httpmq")]
    + [f"retention.{c}" for c in ("jmq4", "zbus", "vibemq-tcp", "vibemq-ws", "httpmq")]
    + [f"spread.{p}" for p in ("zbus", "vibemq-tcp", "vibemq-ws")]
    + [f"clients.{p}" for p in PROTOCOLS]
    + [f"latency.{p}" for p in PROTOCOLS]
    + [f"large-props.{p}.{c}" for p in ("zbus", "vibemq-tcp") for c in PROTOCOLS if c != p]
)
"""Topics ``x.edge.<name>`` of the edge cases (:mod:`.test_edges`), made like the pairs'."""


PASSWORD = "pw-Secret-123"
"""The password :func:`tests.factories.user` gives every user."""


ZBUS_NAMES = {f"x.edge.zbus-name.{c}": f"订单:{c}" for c in PROTOCOLS}
"""Topics zbus clients call by a name a code cannot be (their ``zbus_name``)."""


def topic_for(producer: str, consumer: str) -> str:
    return f"x.{producer}.{consumer}"


@dataclass
class Catalog:
    owner: str
    owner_token: str
    marker_token: str
    console_token: str
    jmq4_port: int


@dataclass
class World:
    """Everything a pair needs: names, tokens, where each front-end listens, the store."""

    catalog: Catalog
    engine: Engine
    """An engine of the test's own on the same Redis (group_stats, progress, read)."""
    web: httpx.AsyncClient
    """The web process (REST API, ``/ws/vibemq``)."""
    mq: httpx.AsyncClient
    """The HTTP-MQ service (``manage.py runproxy``), relaying console-token endpoints to
    the web process."""
    console: httpx.AsyncClient
    """Logged in to the console as ``xoperator`` (a member of the team)."""
    web_url: str
    jmq4_port: int
    zbus_port: int
    zbus_address: str
    """The zbus broker's advertised ``host:port`` (its stamped ``broker`` header)."""
    vibemq_port: int
    servers: dict[str, object] = field(default_factory=dict)

    @property
    def owner(self) -> str:
        return self.catalog.owner

    @property
    def token(self) -> str:
        return self.catalog.owner_token

    def consumer_name(self, topic: str) -> str:
        """The owner's consumer group (policy) name on ``topic``."""
        return f"{self.owner}.{topic}"


def build_catalog(redis_url: str) -> Catalog:
    redis.Redis.from_url(redis_url).flushall()
    with transaction.atomic():
        team = Team.objects.create(name="crossproto")
        cluster = factories.cluster_with_brokers("crossproto", brokers=1)
        jmq4_port = free_port()
        Broker.objects.filter(id=1).update(
            jmq4_port=jmq4_port, zbus_port=free_port(), vibemq_port=free_port()
        )
        owner, owner_token = factories.app("xowner", team)
        codes = [topic_for(p, c) for p, c in PAIRS] + [f"x.edge.{e}" for e in EDGES]
        for code in codes:
            bands = code.startswith("x.edge.priority.")  # PriorityBased: 4 bands
            many = bands or code.startswith("x.edge.spread.")
            topic = factories.topic(code, cluster, team, partitions=4 if many else 1, groups=1)
            PartitionGroup.objects.filter(topic=topic).update(leader_id=1)
            ProducerPolicy.objects.create(topic=topic, app=owner, http_enabled=True)
            ConsumerPolicy.objects.create(
                topic=topic,
                app=owner,
                http_enabled=True,
                start_position="earliest",
                ack_timeout_ms=30_000,
                batch_size=10,
            )
        Topic.objects.filter(code__startswith="x.edge.priority.").update(
            delivery_mode=Topic.DeliveryMode.PRIORITY_BASED
        )
        for code, name in ZBUS_NAMES.items():
            Topic.objects.filter(code=code).update(zbus_name=name)
        Topic.objects.filter(code__startswith="x.edge.retention.").update(retention_max_count=2)
        Topic.objects.filter(code="x.edge.max-size").update(
            max_queue_size=2, overflow_policy=Topic.Overflow.BLOCK_PUBLISHER
        )
        _, marker_token = factories.app("xmarker", team)
        operator = factories.user("xoperator", team=team)
        console_token = factories.token_for(operator)
    publish()
    return Catalog(owner.code, owner_token, marker_token, console_token, jmq4_port)


@pytest.fixture(scope="package")
def catalog(django_db_setup, django_db_blocker) -> Iterator[Catalog]:
    """The committed catalog of the module docstring; flushed (rows and Redis) afterwards."""
    require_test_session()
    redis_url = os.environ["REDIS_URL"]
    with django_db_blocker.unblock():
        try:
            built = build_catalog(redis_url)
        except BaseException:
            call_command("flush", interactive=False, verbosity=0)
            raise
        finally:
            connection.close()
    try:
        yield built
    finally:
        with django_db_blocker.unblock():
            call_command("flush", interactive=False, verbosity=0)
            connection.close()
        redis.Redis.from_url(redis_url).flushall()


ZBUS = ZbusConfig(client_timeout_guess=10.0, reply_ttl=2.0, idle_recheck=1.0, shutdown_grace=1.0)
"""Production settling rules (§13.1: a consume right after a fast delivery settles it)."""
VIBEMQ = VibeConfig(ack_timeout_ms=30_000, timer_interval=0.1, shutdown_grace=1.0)
"""An ack timeout far above a pair's runtime: a redelivery can only be a settling bug."""


@pytest.fixture(scope="package")
def crossproto_mq_url(web_url: str, tmp_path_factory) -> Iterator[str]:
    """An HTTP-MQ service that relays its console-token endpoints to the session's web
    process (``/mq/clustering/queue/offset`` is compared with the console's lag)."""
    from tests.httpmq.conftest import start_proxy, stop

    port = free_port()
    proc = start_proxy(port, tmp_path_factory.mktemp("crossproto-mq") / "proxy.log", web_url)
    yield f"http://127.0.0.1:{port}"
    stop(proc)


@pytest_asyncio.fixture(scope="package", loop_scope="package")
async def world(catalog: Catalog, web_url: str, crossproto_mq_url: str) -> AsyncIterator[World]:
    redis_url = os.environ["REDIS_URL"]
    jmq4 = Jmq4Broker(1, catalog.jmq4_port, redis_url)
    zbus = ZbusBroker(redis_url)
    vibemq = VibeBroker(1, redis_url)
    started: list = []
    client = aioredis.from_url(redis_url)
    watcher = CatalogWatcher(client, resync_interval=0.5)
    await watcher.start()
    engine = Engine(client, lambda: watcher.current)
    web = httpx.AsyncClient(base_url=web_url, timeout=10)
    mq = httpx.AsyncClient(base_url=crossproto_mq_url, timeout=10)
    console = httpx.AsyncClient(base_url=web_url, timeout=10)
    try:
        await jmq4.start(Jmq4Config(max_inflight=16, shutdown_grace=1.0))
        started.append(jmq4)
        await zbus.start(ZBUS)
        started.append(zbus)
        await vibemq.start(VIBEMQ)
        started.append(vibemq)
        await _mq_knows(mq, catalog)
        await _log_in(console, "xoperator")
        yield World(
            catalog=catalog,
            engine=engine,
            web=web,
            mq=mq,
            console=console,
            web_url=web_url,
            jmq4_port=catalog.jmq4_port,
            zbus_port=zbus.port,
            zbus_address=zbus.server.ctx.address,
            vibemq_port=vibemq.port,
            servers={"jmq4": jmq4, "zbus": zbus, "vibemq": vibemq},
        )
    finally:
        for broker in reversed(started):
            await broker.stop()
        await web.aclose()
        await mq.aclose()
        await console.aclose()
        await engine.close()
        await watcher.stop()
        await client.aclose()


@pytest_asyncio.fixture(loop_scope="package")
async def conns() -> AsyncIterator[list]:
    """Connections a test opens (anything with an async ``close``), closed after it."""
    opened: list = []
    yield opened
    for conn in opened:
        await conn.close()


async def _log_in(console: httpx.AsyncClient, username: str) -> None:
    """Log ``console`` in through the login form (a session cookie, as a browser)."""
    page = await console.get("/login/")
    csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)
    assert page.status_code == 200 and csrf, page.text[:300]
    r = await console.post(
        "/login/",
        data={
            "username": username,
            "password": PASSWORD,
            "csrfmiddlewaretoken": csrf.group(1),
        },
    )
    assert r.status_code == 302, (r.status_code, r.text[:300])


async def _mq_knows(mq: httpx.AsyncClient, catalog: Catalog) -> None:
    """Wait until the HTTP-MQ service has this package's catalog: it knows the marker token
    (an HTTP-MQ fetch with it is 403, not 401 — neither reads nor locks anything)."""
    topic = topic_for(*PAIRS[0])

    async def known() -> bool:
        r = await mq.get(
            "/mq/message",
            params={"topic": topic, "consumer": f"{catalog.owner}.{topic}"},
            headers={"Authorization": f"Bearer {catalog.marker_token}"},
        )
        return r.status_code == 403

    await until(known, within=10, what="the HTTP-MQ service to load the catalog")


__all__ += ["EDGES", "PAIRS", "PROTOCOLS", "World", "topic_for", "until"]
