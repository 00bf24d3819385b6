"""The catalog as the pipeline's driver sees it: built from Django or read from the
snapshot published to Redis, handed to Spark as JSON."""

from __future__ import annotations

from django.conf import settings

from brokers.catalog_loader import build_snapshot, current_snapshot, publish
from brokers.engine import CatalogSnapshot
from pipeline.options import encode_catalog


def load_catalog() -> CatalogSnapshot:
    """The current catalog, read from the database on the driver."""
    return build_snapshot()


def published_catalog() -> CatalogSnapshot:
    """The catalog every process follows (published to Redis by the console); published
    now if nothing was yet, so a stream that follows it starts from the database's."""
    snapshot = current_snapshot()
    return snapshot if snapshot.version else publish()


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
