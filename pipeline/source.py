"""The ``mqcloud`` Spark data source: topics as a table, for batch reads and streaming.

Options (all strings, as Spark passes them):

``redis_url``   Redis of the message store (required).
``catalog``     snapshot JSON of the topics, built on the driver (:mod:`pipeline.catalog`).
``topics``      comma-separated topic codes (default: every topic in ``catalog``).
``follow``      streaming only: ``archive`` reads the topics whose archive flag is on in
                the catalog the console publishes to Redis, re-read at every micro-batch
                (``catalog``/``topics`` are then not needed).
``split_size``  most indexes one Spark partition reads (default 100000).
``max_rows_per_batch``  streaming only: most messages one micro-batch reads.
``from_ms`` / ``to_ms``  batch only: store-time range ``[from, to)`` (epoch ms).

Rows are read through :class:`brokers.engine.Engine` (:mod:`pipeline.reading`) and handed
to Spark as Arrow record batches (:mod:`pipeline.columnar`); each Spark task runs its own
event loop and Redis client. The stream reader is :mod:`pipeline.stream`.
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

from pipeline.options import OptionError, SourceOptions
from pipeline.partitions import plan, read_split
from pipeline.reading import run_sync
from pipeline.stream import MqcloudStreamReader

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


class MqcloudBatchReader(DataSourceReader):
    """Batch read of the chosen topics (optionally a store-time range)."""

    def __init__(self, options: dict[str, str]) -> None:
        self.opts = SourceOptions(options)
        if self.opts.follow:
            raise OptionError("option 'follow' is for streams; a batch read names its topics")

    def partitions(self) -> list[InputPartition]:
        opts = self.opts

        async def planned(reader: Any) -> list[InputPartition]:
            out: list[InputPartition] = []
            for info in opts.topics:
                for p in range(info.partitions):
                    lo, hi = await reader.index_range(info.code, p, opts.from_ms, opts.to_ms)
                    out += plan(opts.split_size, info, p, lo, hi)
            return out

        return run_sync(opts.redis_url, opts.snapshot, planned)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        yield from read_split(self.opts.redis_url, partition)


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
