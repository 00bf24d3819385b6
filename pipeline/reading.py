"""Reading partitions through the engine's public API, as rows of the source schema.

Everything here is plain asyncio + redis-py: Spark's Python workers drive it with one
:class:`asyncio.Runner` per split (see :mod:`pipeline.source`). :meth:`StoreReader.batches`
yields Arrow record batches: plain records decoded column by column
(:mod:`pipeline.columnar`), batch records by the engine's own decoder
(``Delivery.message``), one row per index they take, so a row's ``index`` is always the
message's own index. :meth:`StoreReader.rows` gives the same rows as tuples.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import redis.asyncio as aioredis

from brokers.engine import (
    CatalogSnapshot,
    Delivery,
    Engine,
    IndexOutOfRange,
    InvalidMessage,
)
from pipeline.columnar import entries_batch, rows_batch

log = logging.getLogger(__name__)

COLUMNS = (
    "topic",
    "partition",
    "index",
    "app",
    "business_id",
    "attributes",
    "body",
    "priority",
    "send_time",
    "store_time",
    "client_address",
)
COMPRESSED_BATCH_ATTR = "mqcloud.compressedBatch"
Row = tuple[Any, ...]


class StoreGone(RuntimeError):
    """The store holds fewer messages than a planned range (Redis lost data)."""


@dataclass(frozen=True, slots=True)
class Split:
    """A half-open index range ``[start, end)`` of one partition (plain, picklable)."""

    topic: str
    partition: int
    start: int
    end: int


def split_range(topic: str, partition: int, start: int, end: int, size: int) -> list[Split]:
    """Cut ``[start, end)`` into splits of at most ``size`` indexes."""
    return [
        Split(topic, partition, lo, min(lo + size, end)) for lo in range(start, end, max(1, size))
    ]


def expand(topic: str, delivery: Delivery, start: int, end: int) -> Iterator[Row]:
    """Rows (in COLUMNS order; times in ms) of the indexes of ``delivery`` in ``[start, end)``."""
    msg = delivery.message
    send, store, app, address = msg.send_time_ms, msg.store_time_ms, msg.app, msg.client_address
    part, first = delivery.partition, delivery.index
    if not msg.is_batch:
        if start <= first < end:
            yield (topic, part, first, app, msg.business_id, msg.attributes, msg.body,
                   msg.priority, send, store, address)  # fmt: skip
        return
    try:
        items = msg.items()
    except InvalidMessage:  # a batch compressed with a codec the engine cannot inflate
        items = None
    for i in range(delivery.count):
        index = first + i
        if not start <= index < end:
            continue
        if items is not None:
            it = items[i]
            yield (topic, part, index, app, it.business_id, dict(it.attributes or {}), it.body,
                   it.priority, send, store, address)  # fmt: skip
        else:
            attrs = {**msg.attributes, COMPRESSED_BATCH_ATTR: f"{i}/{delivery.count}"}
            body = msg.body if i == 0 else None
            yield (topic, part, index, app, msg.business_id, attrs, body,
                   msg.priority, send, store, address)  # fmt: skip


class StoreReader:
    """An engine on its own Redis client, for one event loop (a Spark task or planner)."""

    def __init__(self, redis_url: str, snapshot: CatalogSnapshot) -> None:
        self.redis = aioredis.from_url(redis_url)
        self.snapshot = snapshot  # the engine's catalog; a planner may load a newer one
        self.engine = Engine(self.redis, lambda: self.snapshot)

    async def close(self) -> None:
        await self.engine.close()
        await self.redis.aclose()

    async def bounds(self, topic: str, partitions: int) -> dict[int, tuple[int, int]]:
        """(min, next) index of every partition of ``topic``."""
        return {p: await self.engine.bounds(topic, p) for p in range(partitions)}

    async def index_range(
        self, topic: str, partition: int, from_ms: int | None, to_ms: int | None
    ) -> tuple[int, int]:
        """Indexes stored in ``[from_ms, to_ms)`` (store time) of one partition."""
        lo, hi = await self.engine.bounds(topic, partition)
        if from_ms is not None:
            lo = max(lo, await self.engine.index_at_time(topic, partition, from_ms))
        if to_ms is not None:
            hi = min(hi, await self.engine.index_at_time(topic, partition, to_ms))
        return lo, max(lo, hi)

    async def _walk(
        self, split: Split, chunk: int, read: Callable[..., Awaitable[list[Any]]]
    ) -> AsyncIterator[tuple[int, list[Any]]]:
        """(position, what ``read`` returned) of each engine read over ``split``, ``chunk``
        indexes per read, in index order (``read`` is the engine's ``read`` or
        ``read_entries``; both results end at an ``index`` + ``count``).

        Indexes trimmed by retention before the read are skipped (logged); a range beyond
        the partition's end raises StoreGone rather than pass silently.
        """
        pos = split.start
        while pos < split.end:
            try:
                got = await read(split.topic, split.partition, pos, min(chunk, split.end - pos))
            except IndexOutOfRange as exc:
                if pos < exc.min_index:
                    log.warning(
                        "%s/%s: indexes %s..%s were trimmed before they were read",
                        split.topic, split.partition, pos, exc.min_index - 1,
                    )  # fmt: skip
                    pos = exc.min_index
                    continue
                raise StoreGone(f"{split}: {exc}") from exc
            if not got:
                raise StoreGone(f"{split}: the partition ends at {pos}")
            yield pos, got
            pos = got[-1].index + got[-1].count

    async def rows(self, split: Split, chunk: int = 4096) -> AsyncIterator[list[Row]]:
        """Rows of ``split`` (tuples in COLUMNS order, times in ms), one list per read."""
        async for pos, got in self._walk(split, chunk, self.engine.read):
            rows: list[Row] = []
            for delivery in got:
                rows.extend(expand(split.topic, delivery, pos, split.end))
            yield rows

    async def batches(self, split: Split, chunk: int = 4096) -> AsyncIterator[pa.RecordBatch]:
        """Arrow record batches of ``split``: plain records column by column, the rest
        (batch records) row by row through the engine's decoder."""
        async for pos, got in self._walk(split, chunk, self.engine.read_entries):
            batch, rest = entries_batch(split.topic, split.partition, got, pos, split.end)
            if batch is not None:
                yield batch
            rows: list[Row] = []
            for delivery in rest:
                rows.extend(expand(split.topic, delivery, pos, split.end))
            if rows:
                yield rows_batch(rows)


def run_sync(redis_url: str, snapshot: CatalogSnapshot, work: Any) -> Any:
    """Run ``await work(reader)`` on a fresh loop and reader (driver-side planning)."""

    async def main() -> Any:
        reader = StoreReader(redis_url, snapshot)
        try:
            return await work(reader)
        finally:
            await reader.close()

    return asyncio.run(main())


def iter_batches(
    redis_url: str, snapshot: CatalogSnapshot, split: Split
) -> Iterator[pa.RecordBatch]:
    """Blocking iterator over the Arrow record batches of ``split`` (one event loop)."""
    with asyncio.Runner() as runner:
        reader = StoreReader(redis_url, snapshot)
        batches = reader.batches(split)
        try:
            while True:
                try:
                    batch = runner.run(anext(batches))
                except StopAsyncIteration:
                    return
                yield batch
        finally:
            runner.run(batches.aclose())
            runner.run(reader.close())
