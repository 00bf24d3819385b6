"""What one Spark task of the ``mqcloud`` source reads: an index range of one partition.

The driver plans input partitions (:func:`plan`); a task reads one with its own event
loop and Redis client (:func:`read_split`) and hands Spark Arrow record batches.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pyspark.sql.datasource import InputPartition

from brokers.engine import CatalogSnapshot, TopicInfo
from pipeline.reading import Split, iter_batches, split_range


class SplitPartition(InputPartition):
    """One Spark input partition: an index range of one topic partition, and how many
    partitions the topic has — all a task's engine needs to read it, so a topic that
    joined a stream after its reader was made (or a batch replayed after a restart) is
    read without the catalog."""

    def __init__(self, split: Split, partitions: int) -> None:
        super().__init__(split)
        self.split = split
        self.partitions = partitions

    def snapshot(self) -> CatalogSnapshot:
        code = self.split.topic
        return CatalogSnapshot(topics={code: TopicInfo(code=code, partitions=self.partitions)})


def read_split(redis_url: str, partition: InputPartition) -> Iterator[Any]:
    """The Arrow record batches of one planned partition."""
    if not isinstance(partition, SplitPartition):
        return  # Spark's placeholder partition of an empty plan: nothing to read
    yield from iter_batches(redis_url, partition.snapshot(), partition.split)


def plan(split_size: int, topic: TopicInfo, partition: int, lo: int, hi: int) -> list[Any]:
    """The input partitions reading ``[lo, hi)`` of one topic partition."""
    splits = split_range(topic.code, partition, lo, hi, split_size)
    return [SplitPartition(s, topic.partitions) for s in splits]
