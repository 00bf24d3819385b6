"""The catalog as the pipeline's driver sees it: built from Django, handed to Spark as JSON."""

from __future__ import annotations

import json

import redis
from django.conf import settings

from brokers.catalog_loader import build_snapshot
from brokers.engine import CatalogSnapshot
from pipeline.options import encode_catalog
from pipeline.reading import StoreReader, run_sync


def load_catalog() -> CatalogSnapshot:
    """The current catalog, read from the database on the driver."""
    return build_snapshot()


def archived_topics(snapshot: CatalogSnapshot) -> list[str]:
    """Codes of the topics whose archive flag is on, sorted."""
    return sorted(code for code, info in snapshot.topics.items() if info.archive)


def partition_brokers(snapshot: CatalogSnapshot) -> list[tuple[str, int, int]]:
    """(topic, partition, leader broker) of every partition that has a leader."""
    return [
        (code, p, leader)
        for code, info in snapshot.topics.items()
        for p in range(info.partitions)
        if (leader := info.leader_of(p)) is not None
    ]


def source_options(
    snapshot: CatalogSnapshot, topics: list[str], *, redis_url: str | None = None, **extra: object
) -> dict[str, str]:
    """Options of the ``mqcloud`` source for ``topics`` (``extra`` values become strings)."""
    opts = {
        "redis_url": redis_url or settings.REDIS_URL,
        "catalog": encode_catalog(snapshot, topics),
        "topics": ",".join(topics),
    }
    opts.update({k: str(v) for k, v in extra.items() if v is not None})
    return opts


def save_offsets(key: str, offsets: str, redis_url: str | None = None) -> None:
    """Remember a job's last committed source offsets (JSON) under ``key``."""
    client = redis.Redis.from_url(redis_url or settings.REDIS_URL)
    try:
        client.set(key, offsets)
    finally:
        client.close()


def backlog(
    snapshot: CatalogSnapshot, topics: list[str], committed_key: str, redis_url: str | None = None
) -> int | None:
    """Messages of ``topics`` beyond the offsets stored under ``committed_key`` (None if
    nothing was committed yet), measured with the engine's partition bounds."""
    url = redis_url or settings.REDIS_URL

    async def measure(reader: StoreReader) -> int | None:
        raw = await reader.redis.get(committed_key)
        if raw is None:
            return None
        committed = json.loads(raw)
        total = 0
        for t in topics:
            for p, (lo, hi) in (await reader.bounds(t, snapshot.topics[t].partitions)).items():
                done = max(lo, int(committed.get(t, {}).get(str(p), 0)))
                total += max(0, hi - done)
        return total

    return run_sync(url, snapshot, measure)
