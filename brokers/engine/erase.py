"""Erasing a deleted topic's or consumer group's data: every key the engine keeps for it.

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

A deleted consumer group (an app's consumer policy) leaves the same way: its progress on
each partition (its own and every broadcast client's, ``<app>#<clientId>``), its retry
store and dead letters ``{r:<topic>:<app>}``, its bookkeeping ``{g:…}`` and its
assignments ``{a:…}`` — found by the topic's scan and picked by name.

A scan walks the whole keyspace: O(keys), about 1,000 keys per round trip — a rare
operator action, never on a message path. A broadcast client that went away for good
(:func:`erase_clients`) is erased by name, without a scan.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from brokers.engine.delay import DELAYED_TOPICS
from brokers.engine.groups import progress_keys
from brokers.engine.keys import PREFIX, GroupKeys, RetryKeys, consumer_id
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


GROUP_FAMILIES = "rga"
"""The hash-tag letters of the key families of one consumer group: ``{<f>:<topic>:<app>}``."""


PROGRESS_FIELDS = frozenset(key.rsplit(":", 2)[1] for key in progress_keys("t", 0, "c"))
"""The names of a consumer's progress keys in a partition (``…}:<name>:<cid>``)."""


async def _unlink_matching(
    client: AnyRedis, pattern: str, wanted: Callable[[str], bool] | None = None
) -> int:
    """UNLINK the keys matching ``pattern`` (and ``wanted``, if given); how many."""
    erased = 0
    found: list[bytes] = []
    async for key in client.scan_iter(match=pattern, count=SCAN_COUNT):
        if wanted is not None and not wanted(key.decode("utf-8", "replace")):
            continue
        found.append(key)
        if len(found) >= UNLINK_BATCH:
            erased += int(await client.unlink(*found))
            found = []
    if found:
        erased += int(await client.unlink(*found))
    return erased


async def erase_topic(client: AnyRedis, topic: str) -> int:
    """Delete every key of ``topic``; how many were deleted."""
    erased = await _unlink_matching(client, topic_key_pattern(topic))
    await client.srem(DELAYED_TOPICS, topic)
    return erased


def group_key_test(topic: str, app: str) -> Callable[[str], bool]:
    """Whether a key of ``topic`` belongs to consumer group ``app`` (its broadcast
    clients' progress included)."""
    tags = tuple(f"{PREFIX}:{{{family}:{topic}:{app}}}" for family in GROUP_FAMILIES)
    partitions = f"{PREFIX}:{{t:{topic}:"

    def mine(key: str) -> bool:
        if key.startswith(tags):
            return True
        if not key.startswith(partitions):
            return False
        field, _, cid = key.partition("}:")[2].partition(":")
        return field in PROGRESS_FIELDS and (cid == app or cid.startswith(app + "#"))

    return mine


async def erase_group(client: AnyRedis, topic: str, app: str) -> int:
    """Delete every key of consumer group ``app`` on ``topic``; how many were deleted."""
    return await _unlink_matching(client, topic_key_pattern(topic), group_key_test(topic, app))


async def erase_clients(
    client: AnyRedis, topic: str, partitions: range, app: str, client_ids: Sequence[str]
) -> None:
    """Delete what the broadcast clients ``client_ids`` of ``app`` keep on ``topic``:
    their progress in each partition, their own retries and resend lists (their names
    are known: no scan). One pipelined round trip; each ``UNLINK`` names keys of one
    slot."""
    pipe = client.pipeline(transaction=False)
    for client_id in client_ids:
        cid = consumer_id(app, client_id)
        for p in partitions:
            pipe.execute_command("UNLINK", *progress_keys(topic, p, cid))
        retries = RetryKeys(topic, app, client_id)
        pipe.execute_command("UNLINK", retries.due, retries.data, retries.meta)
        pipe.execute_command("UNLINK", GroupKeys(topic, app).resend(client_id))
    if client_ids:
        await pipe.execute()
