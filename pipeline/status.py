"""How far the archive got: per topic and partition, archived up to which index, and the lag.

The archive job stores the end offsets of every micro-batch it saw committed under
:data:`COMMIT_KEY` (``{"topic": {"partition": next index}}``, JSON); the store's bounds
say what is there. A topic whose archive flag is on but that the stream has not read yet
has its whole stored range as lag, so the lag is never 0 for a topic nobody reads. The
console's Pipeline page and the job's run record both use :func:`archive_status`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import redis

from brokers.engine import CatalogSnapshot, load_snapshot
from pipeline.reading import StoreReader, run_sync

COMMIT_KEY = "mqcloud:{pipeline}:archive:committed"
Offsets = dict[str, dict[str, int]]


@dataclass(frozen=True)
class PartitionStatus:
    partition: int
    min_index: int
    next_index: int
    archived: int | None  # next index not archived yet; None: never read

    @property
    def lag(self) -> int:
        """Stored messages not archived yet (trimmed ones are gone, not lag)."""
        done = self.min_index if self.archived is None else max(self.min_index, self.archived)
        return max(0, self.next_index - done)


@dataclass(frozen=True)
class TopicStatus:
    topic: str
    archive: bool  # the flag is on: the stream reads it
    partitions: list[PartitionStatus] = field(default_factory=list)

    @property
    def read(self) -> bool:
        """Whether the stream has archived anything of it yet."""
        return any(p.archived is not None for p in self.partitions)

    @property
    def lag(self) -> int | None:
        """Messages waiting for the archive; None for a topic whose archive is off."""
        return sum(p.lag for p in self.partitions) if self.archive else None

    @property
    def archived_to(self) -> dict[int, int | None]:
        return {p.partition: p.archived for p in self.partitions}


def save_committed(offsets: Offsets, redis_url: str) -> None:
    """Remember the end offsets of the archive's last committed micro-batch."""
    client = redis.Redis.from_url(redis_url)
    try:
        client.set(COMMIT_KEY, json.dumps(offsets, sort_keys=True))
    finally:
        client.close()


def archive_status(
    redis_url: str, snapshot: CatalogSnapshot | None = None, key: str = COMMIT_KEY
) -> list[TopicStatus]:
    """Every topic whose archive is on or that was archived before, by code; ``snapshot``
    None reads the catalog the console published to Redis."""

    async def measure(reader: StoreReader) -> list[TopicStatus]:
        snap = snapshot if snapshot is not None else await load_snapshot(reader.redis)
        reader.snapshot = snap
        raw = await reader.redis.get(key)
        committed: Offsets = json.loads(raw) if raw else {}
        out = []
        for code in sorted(snap.topics):
            info = snap.topics[code]
            done = committed.get(code)
            if not info.archive and done is None:
                continue
            parts = []
            for p, (lo, hi) in (await reader.bounds(code, info.partitions)).items():
                at = None if done is None or str(p) not in done else int(done[str(p)])
                parts.append(PartitionStatus(p, lo, hi, at))
            out.append(TopicStatus(code, info.archive, parts))
        return out

    return run_sync(redis_url, snapshot or CatalogSnapshot(), measure)


def total_lag(statuses: list[TopicStatus]) -> int:
    """Messages of every archived topic not archived yet."""
    return sum(s.lag or 0 for s in statuses)
