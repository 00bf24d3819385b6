"""Fixtures of the pipeline tests: one local SparkSession per module, a catalog with
archived topics, and produce/read helpers over the real engine and Parquet archive."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator

import pytest
import redis
import redis.asyncio as aioredis

from brokers.catalog_loader import build_snapshot, publish
from brokers.engine import CatalogSnapshot, Engine, Message
from brokers.models import ConsumerPolicy, ProducerPolicy, Team
from pipeline.session import spark_session
from tests import factories


@pytest.fixture(scope="module")
def spark() -> Iterator[object]:
    """A local[2] SparkSession shared by the tests of one module."""
    logging.getLogger("py4j").setLevel(logging.WARNING)
    conf = {"spark.sql.shuffle.partitions": "2", "spark.ui.showConsoleProgress": "false"}
    session = spark_session("local[2]", "mqcloud-tests", conf=conf)
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture
def archive_dir(tmp_path, settings) -> str:
    """ARCHIVE_URL of this test: a fresh local directory."""
    settings.ARCHIVE_URL = str(tmp_path / "archive")
    return settings.ARCHIVE_URL


@pytest.fixture
def catalog(db, redis_url, settings) -> CatalogSnapshot:
    """Two brokers; ``orders`` (3 partitions, archived) and ``audit`` (2, archived) produced
    by ``shop``; ``clicks`` (2, not archived) produced by ``web``; ``billing`` consumes
    ``orders``."""
    settings.REDIS_URL = redis_url
    team = Team.objects.create(name="t1")
    cluster = factories.cluster_with_brokers()
    shop, _ = factories.app("shop", team)
    web, _ = factories.app("web", team)
    billing, _ = factories.app("billing", team)
    for code, parts, app, archive in (
        ("orders", 3, shop, True),
        ("audit", 2, shop, True),
        ("clicks", 2, web, False),
    ):
        t = factories.topic(code, cluster, team, partitions=parts, groups=2)
        ProducerPolicy.objects.create(name=f"{app.code}.{code}", topic=t, app=app, archive=archive)
        if code == "orders":
            ConsumerPolicy.objects.create(name=f"billing.{code}", topic=t, app=billing)
    return build_snapshot()


def message(topic: str, partition: int, n: int, **kw: object) -> Message:
    """A message whose body and businessId name where it was produced."""
    return Message(
        f"{topic}-{partition}-{n}".encode(),
        business_id=f"biz-{topic}-{partition}-{n}",
        attributes={"n": str(n)},
        **kw,
    )


class Store:
    """The real engine on the session's Redis, driven from synchronous tests."""

    def __init__(self, redis_url: str, catalog: CatalogSnapshot, clock=None) -> None:
        self.redis_url, self.catalog, self.clock = redis_url, catalog, clock

    def run(self, work):
        """``await work(engine)`` on a fresh engine and event loop."""

        async def main():
            client = aioredis.from_url(self.redis_url)
            kw = {"clock": self.clock} if self.clock else {}
            engine = Engine(client, lambda: self.catalog, **kw)
            try:
                return await work(engine)
            finally:
                await engine.close()
                await client.aclose()

        return asyncio.run(main())

    def produce(
        self, topic: str, app: str, partitions: int, per_partition: int, start: int = 0
    ) -> set[tuple[str, int, int]]:
        """Append ``per_partition`` messages to each partition (half of them in one
        append call); the (topic, partition, index) of every message appended."""

        async def work(engine: Engine) -> set[tuple[str, int, int]]:
            out = set()
            for p in range(partitions):
                msgs = [message(topic, p, start + i) for i in range(per_partition)]
                half = len(msgs) // 2
                results = (
                    [await engine.append(topic, app, msgs[:half], partition=p)] if half else []
                )
                for m in msgs[half:]:
                    results.append(await engine.append(topic, app, [m], partition=p))
                for r in results:
                    out |= {(topic, p, i) for i in range(r.first_index, r.first_index + r.count)}
            return out

        return self.run(work)


@pytest.fixture
def store(catalog, redis_url) -> Store:
    """The engine on a flushed Redis, with the test catalog (published, as the console
    does: the archive stream follows the published catalog)."""
    client = redis.Redis.from_url(redis_url)
    client.flushall()
    client.close()
    publish()
    return Store(redis_url, catalog)


def archived_rows(spark, path: str) -> list:
    """Every row of the Parquet archive (through the file sink's log)."""
    return spark.read.parquet(path).collect()
