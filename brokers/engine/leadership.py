"""Which broker leads each partition, as Redis records it: the fence of a stale leader.

A broker learns leadership from its catalog snapshot, which can be stale: a broker that was
paused (SIGSTOP, a long GC, a VM freeze) past the dead-after time resumes believing it still
leads partitions that failover gave to another broker, and acknowledges writes for them
until its watcher catches up. So the catalog publisher also records each partition's
leader in the partition's meta hash (``ldr``, with the catalog version ``lv`` that set it,
so an older publish never overwrites a newer one), and an append made *as a leader* (JMQ4
produce, :meth:`brokers.engine.Engine.append` with ``leader=``) is refused inside the
append script when Redis names another broker — atomically with the write, not after a
catalog refresh. A partition without a record (a topic without groups, a catalog never
published since this was added) is not fenced.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from brokers.engine.catalog import TopicInfo
from brokers.engine.keys import PartitionKeys

RECORD_LEADER_LUA = """
-- KEYS: partition meta. ARGV: leader broker id, catalog version.
local lv = tonumber(redis.call('HGET', KEYS[1], 'lv') or '-1')
if lv >= tonumber(ARGV[2]) then return 0 end
redis.call('HSET', KEYS[1], 'ldr', ARGV[1], 'lv', ARGV[2])
return 1
"""


def leader_records(topics: Iterable[TopicInfo | None]) -> Iterator[tuple[str, int]]:
    """(partition meta key, leader broker id) of every partition of ``topics`` that is in a
    group (pass ``snapshot.topics.values()`` for the whole catalog)."""
    for topic in topics:
        if topic is None:
            continue
        for group in topic.groups:
            for partition in group.partitions:
                yield PartitionKeys(topic.code, partition).meta, group.leader
