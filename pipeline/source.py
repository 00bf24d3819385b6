"""The ``mqcloud`` Spark data source: topics as a table, for batch reads and streaming.

Options (all strings, as Spark passes them):

``redis_url``   Redis of the message store (required).
``catalog``     snapshot JSON of the topics, built on the driver (:mod:`pipeline.catalog`).
``topics``      comma-separated topic codes (default: every topic in ``catalog``).
``split_size``  most indexes one Spark partition reads (default 100000).
``from_ms`` / ``to_ms``  batch only: store-time range ``[from, to)`` (epoch ms).

Streaming offsets are ``{"topic": {"partition": next index}}``; a micro-batch reads
``[start, end)`` of every partition, so a query restarted from its checkpoint replays
exactly the planned ranges. Rows are read through :class:`brokers.engine.Engine`
(:mod:`pipeline.reading`); each Spark task runs its own event loop and Redis client.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from pipeline.options import OptionError, decode_catalog, int_option, select_topics
from pipeline.reading import Row, Split, iter_rows, run_sync, split_range

SCHEMA = StructType(
    [
        StructField("topic", StringType(), False),
        StructField("partition", IntegerType(), False),
        StructField("index", LongType(), False),
        StructField("app", StringType(), True),
        StructField("business_id", StringType(), True),
        StructField("attributes", MapType(StringType(), StringType(), True), True),
        StructField("body", BinaryType(), True),
        StructField("priority", IntegerType(), True),
        StructField("send_time", TimestampType(), True),
        StructField("store_time", TimestampType(), True),
        StructField("client_address", StringType(), True),
    ]
)
DEFAULT_SPLIT = 100_000
Offsets = dict[str, dict[str, int]]


class SplitPartition(InputPartition):
    """One Spark input partition: an index range of one topic partition."""

    def __init__(self, split: Split) -> None:
        super().__init__(split)
        self.split = split


class _Options:
    """Validated options shared by the batch and the stream reader."""

    def __init__(self, options: dict[str, str]) -> None:
        self.redis_url = options.get("redis_url") or ""
        if not self.redis_url.startswith(("redis://", "rediss://", "unix://")):
            raise OptionError("option 'redis_url' must be a redis://, rediss:// or unix:// URL")
        self.catalog_json = options.get("catalog")
        self.snapshot = decode_catalog(self.catalog_json)
        self.topics = select_topics(self.snapshot, options.get("topics"))
        self.split_size = int_option(options, "split_size", DEFAULT_SPLIT, minimum=1)
        self.from_ms = int_option(options, "from_ms", None)
        self.to_ms = int_option(options, "to_ms", None)


def _to_batch(rows: list[Row]) -> Any:
    """An Arrow record batch of ``rows`` in the source schema."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema

    schema = to_arrow_schema(SCHEMA)
    cols = list(zip(*rows, strict=True))
    arrays = []
    for i, field in enumerate(schema):
        values = cols[i]
        if field.name in ("send_time", "store_time"):
            values = [v * 1000 for v in values]  # ms -> µs
        elif field.name == "attributes":
            values = [list(v.items()) for v in values]
        arrays.append(pa.array(values, type=field.type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _read(opts: _Options, split: Split) -> Iterator[Any]:
    for rows in iter_rows(opts.redis_url, opts.snapshot, split):
        if rows:
            yield _to_batch(rows)


class MqcloudBatchReader(DataSourceReader):
    """Batch read of the chosen topics (optionally a store-time range)."""

    def __init__(self, options: dict[str, str]) -> None:
        self.opts = _Options(options)

    def partitions(self) -> list[InputPartition]:
        opts = self.opts

        async def plan(reader: Any) -> list[InputPartition]:
            out: list[InputPartition] = []
            for info in opts.topics:
                for p in range(info.partitions):
                    lo, hi = await reader.index_range(info.code, p, opts.from_ms, opts.to_ms)
                    splits = split_range(info.code, p, lo, hi, opts.split_size)
                    out += [SplitPartition(s) for s in splits]
            return out

        return run_sync(opts.redis_url, opts.snapshot, plan)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        if not isinstance(partition, SplitPartition):
            return  # Spark's placeholder partition of an empty plan: nothing to read
        yield from _read(self.opts, partition.split)


class MqcloudStreamReader(DataSourceStreamReader):
    """Micro-batches over per-partition index offsets."""

    def __init__(self, options: dict[str, str]) -> None:
        self.opts = _Options(options)
        if self.opts.from_ms is not None or self.opts.to_ms is not None:
            raise OptionError("from_ms/to_ms are batch options; a stream starts at each min index")

    def _bounds(self) -> dict[str, dict[str, tuple[int, int]]]:
        topics = self.opts.topics

        async def all_bounds(reader: Any) -> dict[str, dict[str, tuple[int, int]]]:
            out = {}
            for info in topics:
                got = await reader.bounds(info.code, info.partitions)
                out[info.code] = {str(p): b for p, b in got.items()}
            return out

        return run_sync(self.opts.redis_url, self.opts.snapshot, all_bounds)

    def initialOffset(self) -> Offsets:
        return {t: {p: lo for p, (lo, _hi) in parts.items()} for t, parts in self._bounds().items()}

    def latestOffset(self) -> Offsets:
        return {t: {p: hi for p, (_lo, hi) in parts.items()} for t, parts in self._bounds().items()}

    def partitions(self, start: Offsets, end: Offsets) -> list[InputPartition]:
        out: list[InputPartition] = []
        for topic, parts in sorted(end.items()):
            begun = start.get(topic, {})
            for p, hi in sorted(parts.items(), key=lambda kv: int(kv[0])):
                lo = int(begun.get(p, 0))  # a topic new to the query starts at its beginning
                out += [
                    SplitPartition(s)
                    for s in split_range(topic, int(p), lo, int(hi), self.opts.split_size)
                ]
        return out

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, SplitPartition)
        yield from _read(self.opts, partition.split)

    def commit(self, end: Offsets) -> None:
        """Nothing to release: the store keeps messages until retention trims them."""


class MqcloudDataSource(DataSource):
    """``spark.read.format("mqcloud")`` / ``spark.readStream.format("mqcloud")``."""

    @classmethod
    def name(cls) -> str:
        return "mqcloud"

    def schema(self) -> StructType:
        return SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return MqcloudBatchReader(self.options)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return MqcloudStreamReader(self.options)
