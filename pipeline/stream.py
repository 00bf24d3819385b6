"""The stream reader of the ``mqcloud`` source: micro-batches over per-partition indexes.

Offsets are ``{"topic": {"partition": next index}}``; a micro-batch reads ``[start, end)``
of every partition, so a query restarted from its checkpoint replays exactly the planned
ranges (the input partitions carry everything a task needs, catalog included).

With ``follow=archive`` the topics are those whose archive flag is on in the catalog
snapshot the console publishes to Redis, read again at every trigger: a topic turned on
joins the next micro-batch from its first stored index; a topic turned off keeps its
offsets (frozen, nothing planned for it) and resumes there if it is turned on again; a
topic deleted from the catalog leaves the offsets.

Admission control: ``max_rows_per_batch`` caps a micro-batch (shared fairly between the
partitions with data). Trigger.AvailableNow: :meth:`prepareForTriggerAvailableNow` records
the end of every partition at the query's start and no micro-batch reads past it, so a
``--once`` run archives exactly what was there when it started, in as many micro-batches
as the cap makes.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from brokers.engine import CatalogSnapshot, TopicInfo, load_snapshot
from pipeline.options import OptionError, SourceOptions
from pipeline.partitions import plan, read_split
from pipeline.reading import StoreReader, run_sync

log = logging.getLogger(__name__)

Offsets = dict[str, dict[str, int]]
Bounds = dict[str, dict[str, tuple[int, int]]]


def archived(snapshot: CatalogSnapshot) -> tuple[TopicInfo, ...]:
    """The topics of ``snapshot`` whose archive flag is on, by code."""
    return tuple(snapshot.topics[c] for c in sorted(snapshot.topics) if snapshot.topics[c].archive)


def advance(start: Offsets, bounds: Bounds, known: set[str]) -> Offsets:
    """Where every partition of the topics read now ends (``bounds``: their (min, next)
    indexes); topics no longer read keep their start, deleted ones (not ``known``) go."""
    end = {t: dict(parts) for t, parts in start.items() if t in known and t not in bounds}
    for topic, parts in bounds.items():
        begun = start.get(topic, {})
        end[topic] = {p: max(int(begun.get(p, 0)), hi) for p, (_lo, hi) in parts.items()}
    return {t: dict(sorted(end[t].items(), key=lambda kv: int(kv[0]))) for t in sorted(end)}


def cap(start: Offsets, end: Offsets, target: Offsets) -> Offsets:
    """``end`` held at ``target`` (the offsets of an AvailableNow query's start): a
    partition that was not there then stays where it starts."""
    out: Offsets = {}
    for topic, parts in end.items():
        begun, stop = start.get(topic, {}), target.get(topic, {})
        row = {}
        for p, hi in parts.items():
            if p in stop:
                row[p] = max(int(begun.get(p, 0)), min(hi, int(stop[p])))
            elif p in begun:
                row[p] = int(begun[p])
        if row or topic in start:
            out[topic] = row
    return out


def limit_rows(start: Offsets, end: Offsets, budget: int) -> Offsets:
    """``end`` pulled back so that at most ``budget`` messages are read, shared evenly
    between the partitions that have any (in topic, partition order for the remainder)."""
    want = {
        (t, p): hi - int(start.get(t, {}).get(p, 0))
        for t, parts in end.items()
        for p, hi in parts.items()
        if hi > int(start.get(t, {}).get(p, 0))
    }
    grant = dict.fromkeys(want, 0)
    left = budget
    while left > 0:
        open_ = [k for k in want if grant[k] < want[k]]
        if not open_:
            break
        share = max(1, left // len(open_))
        for k in open_:
            take = min(share, want[k] - grant[k], left)
            grant[k] += take
            left -= take
            if left == 0:
                break
    out = {t: dict(parts) for t, parts in end.items()}
    for (t, p), n in grant.items():
        out[t][p] = int(start.get(t, {}).get(p, 0)) + n
    return out


class MqcloudStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches over per-partition index offsets (see the module's docstring)."""

    def __init__(self, options: dict[str, str]) -> None:
        self.opts = SourceOptions(options)
        if self.opts.from_ms is not None or self.opts.to_ms is not None:
            raise OptionError("from_ms/to_ms are batch options; a stream starts at each min index")
        self.target: Offsets | None = None
        self.latest: Offsets | None = None

    def _bounds(self) -> tuple[Bounds, set[str]]:
        """(min, next) of every partition of the topics read now, and every topic code of
        the catalog."""
        opts = self.opts

        async def measure(reader: StoreReader) -> tuple[Bounds, set[str]]:
            if opts.follow:
                reader.snapshot = await load_snapshot(reader.redis)
                topics = archived(reader.snapshot)
            else:
                topics = opts.topics
            out: Bounds = {}
            for info in topics:
                got = await reader.bounds(info.code, info.partitions)
                out[info.code] = {str(p): b for p, b in got.items()}
            return out, set(reader.snapshot.topics)

        return run_sync(opts.redis_url, opts.snapshot, measure)

    def initialOffset(self) -> Offsets:
        bounds, _known = self._bounds()
        return {t: {p: lo for p, (lo, _hi) in parts.items()} for t, parts in bounds.items()}

    def latestOffset(self, start: Offsets, limit: ReadLimit) -> Offsets:
        bounds, known = self._bounds()
        end = self.latest = advance(start, bounds, known)
        if self.target is not None:
            end = cap(start, end, self.target)
        if isinstance(limit, ReadMaxRows):
            end = limit_rows(start, end, limit.max_rows)
        return end

    def reportLatestOffset(self) -> Offsets | None:
        """The store's end as the last trigger saw it (the query's progress shows it, and
        the lag is measured against it)."""
        return self.latest

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_rows is not None:
            return ReadMaxRows(self.opts.max_rows)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        bounds, known = self._bounds()
        self.target = advance({}, bounds, known)
        log.info("mqcloud stream: available now %s", self.target)

    def partitions(self, start: Offsets, end: Offsets) -> list[InputPartition]:
        out: list[InputPartition] = []
        for topic, parts in sorted(end.items()):
            begun = start.get(topic, {})
            count = max((int(p) for p in parts), default=-1) + 1
            info = TopicInfo(code=topic, partitions=max(1, count))
            for p, hi in sorted(parts.items(), key=lambda kv: int(kv[0])):
                lo = int(begun.get(p, 0))  # a topic new to the query starts at its beginning
                out += plan(self.opts.split_size, info, int(p), lo, int(hi))
        return out

    def read(self, partition: InputPartition) -> Iterator[Any]:
        yield from read_split(self.opts.redis_url, partition)

    def commit(self, end: Offsets) -> None:
        """Nothing to release: the store keeps messages until retention trims them."""
