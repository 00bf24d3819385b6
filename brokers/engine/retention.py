"""Retention: trim partitions by max age and max count, moving the min index.

The cut is the larger of ``next - max_count`` and the first index stored at or after
``now - max_age``. Entries wholly below the cut are removed (XTRIM MINID); an entry (one
append call, or a batch) that straddles the cut is kept whole, so a partition may hold
up to one call's messages more than ``max_count``; ``min`` becomes the first index still
stored. Consumers whose ack index falls below ``min`` continue from ``min``.
"""

from __future__ import annotations

from brokers.engine.catalog import TopicInfo
from brokers.engine.keys import PartitionKeys
from brokers.engine.read import index_at_time
from brokers.engine.redisio import AnyRedis, Script

TRIM = Script(
    """
-- KEYS: stream, meta. ARGV: cut index. Returns the new min.
local m = redis.call('HMGET', KEYS[2], 'min', 'next')
local mn, nxt = tonumber(m[1] or '0'), tonumber(m[2] or '0')
local cut = tonumber(ARGV[1])
if cut > nxt then cut = nxt end
if cut <= mn then return s(mn) end
local keep = cut
if cut < nxt then
  local e = redis.call('XREVRANGE', KEYS[1], s(cut) .. '-18446744073709551615', '-', 'COUNT', 1)[1]
  if e then
    local fi, c = first_of(e[1])
    if fi + c > cut then keep = fi end
  end
end
if keep <= mn then return s(mn) end
redis.call('XTRIM', KEYS[1], 'MINID', s(keep) .. '-0')
redis.call('HSET', KEYS[2], 'min', s(keep))
return s(keep)
"""
)


async def trim_partition(client: AnyRedis, topic: TopicInfo, partition: int, now_ms: int) -> int:
    """Apply the topic's retention to one partition; returns the min index after."""
    keys = PartitionKeys(topic.code, partition)
    nxt = int(await client.hget(keys.meta, "next") or 0)
    cut = 0
    if topic.retention_max_count is not None:
        cut = max(cut, nxt - topic.retention_max_count)
    if topic.retention_max_age_s is not None:
        cut = max(
            cut,
            await index_at_time(
                client, topic.code, partition, now_ms - topic.retention_max_age_s * 1000
            ),
        )
    return int(await TRIM(client, (keys.stream, keys.meta), (cut,)))
