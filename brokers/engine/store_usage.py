"""What the store holds, for the capacity report (the reference console's "daily capacity
report"): each master node's memory in use and its limit, and the number of messages
stored per topic.

On a single Redis the node is the engine's server; on Redis Cluster every master is
asked. Stored messages are counted from each partition's ``min``/``next`` bounds — one
``HMGET`` per partition, pipelined :data:`CHUNK` at a time — so a fleet of thousands of
topics costs a few round trips, never a scan of the messages.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from redis.asyncio.cluster import RedisCluster

from brokers.engine.keys import PartitionKeys
from brokers.engine.redisio import AnyRedis

CHUNK = 5000
"""Partitions read per pipelined round trip."""


@dataclass(frozen=True, slots=True)
class StoreNode:
    """One master of the store: ``used_bytes`` of memory in use, ``max_bytes`` its limit
    (0: none set), ``keys`` in its database."""

    name: str
    used_bytes: int
    max_bytes: int
    keys: int


def node_of(name: str, memory: dict[str, Any], keyspace: dict[str, Any]) -> StoreNode:
    """A :class:`StoreNode` from ``INFO memory`` and ``INFO keyspace`` of ``name``."""
    keys = sum(int(db.get("keys", 0)) for db in keyspace.values() if isinstance(db, dict))
    return StoreNode(
        name,
        int(memory.get("used_memory", 0)),
        int(memory.get("maxmemory", 0)),
        keys,
    )


async def store_nodes(client: AnyRedis) -> list[StoreNode]:
    """Every master of the store with its memory and keys."""
    if isinstance(client, RedisCluster):
        out: list[StoreNode] = []
        for node in client.get_primaries():
            memory = await client.info("memory", target_nodes=node)  # type: ignore[call-arg]
            keyspace = await client.info("keyspace", target_nodes=node)  # type: ignore[call-arg]
            out.append(node_of(node.name, memory, keyspace))
        return out
    kwargs = client.connection_pool.connection_kwargs
    name = f"{kwargs.get('host', '?')}:{kwargs.get('port', '?')}"
    return [node_of(name, await client.info("memory"), await client.info("keyspace"))]


async def stored_messages(client: AnyRedis, topics: Sequence[tuple[str, int]]) -> dict[str, int]:
    """Messages stored now per topic of ``(topic, partitions)`` (retention's trims taken
    off), in ``ceil(partitions / CHUNK)`` round trips."""
    slots = [(topic, p) for topic, partitions in topics for p in range(partitions)]
    totals = {topic: 0 for topic, _ in topics}
    for start in range(0, len(slots), CHUNK):
        chunk = slots[start : start + CHUNK]
        pipe = client.pipeline(transaction=False)
        for topic, p in chunk:
            pipe.hmget(PartitionKeys(topic, p).meta, "min", "next")
        for (topic, _), (lo, hi) in zip(chunk, await pipe.execute(), strict=True):
            totals[topic] += max(0, int(hi or 0) - int(lo or 0))
    return totals
