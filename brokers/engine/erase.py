"""Erasing a deleted topic's data: every key the engine keeps for it, on every node.

Every key of a topic carries the topic's name right after its family's hash-tag letter
(:mod:`brokers.engine.keys`): partitions ``{t:<topic>:<p>}``, retry stores and dead
letters ``{r:<topic>:<app>}``, transactions ``{x:…}``, group bookkeeping ``{g:…}``
(broadcast registry, resend lists), producer buckets ``{p:…}``, the turn counter
``{o:<topic>}``, partition-group assignments ``{a:…}`` and delayed messages
``{d:<topic>}`` (:mod:`brokers.engine.delay`). So one ``SCAN`` with one pattern finds them
all — on each node of a cluster — and ``UNLINK`` frees them in the background, without
knowing which apps ever consumed. Keys that expire on their own (rate-limit buckets,
presence, mailboxes) and the per-day traffic counters (30 days of history for the
console and the pipeline) are left to expire.

A scan walks the whole keyspace: O(keys), about 1,000 keys per round trip — a rare
operator action, never on a message path.
"""

from __future__ import annotations

import re

from brokers.engine.delay import DELAYED_TOPICS
from brokers.engine.keys import PREFIX
from brokers.engine.redisio import AnyRedis

FAMILIES = "trxgpoad"
"""The hash-tag letters of the key families that name a topic first."""
_GLOB = re.compile(r"([*?\[\]\\^])")
SCAN_COUNT = 1000
UNLINK_BATCH = 500


def topic_key_pattern(topic: str) -> str:
    """The ``SCAN MATCH`` pattern of every key of ``topic`` (and of no other topic: the
    name is followed by ``:`` or ``}``, which no topic name holds)."""
    escaped = _GLOB.sub(r"\\\1", topic)
    return f"{PREFIX}:{{[{FAMILIES}]:{escaped}[:}}]*"


async def erase_topic(client: AnyRedis, topic: str) -> int:
    """Delete every key of ``topic``; how many were deleted."""
    erased = 0
    found: list[bytes] = []
    async for key in client.scan_iter(match=topic_key_pattern(topic), count=SCAN_COUNT):
        found.append(key)
        if len(found) >= UNLINK_BATCH:
            erased += int(await client.unlink(*found))
            found = []
    if found:
        erased += int(await client.unlink(*found))
    await client.srem(DELAYED_TOPICS, topic)
    return erased
