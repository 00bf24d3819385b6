"""The numbers of a fan-out queue: what no member was handed yet, and what some member was
handed and not every member settled.

A fan-out queue (FanOutWithAck / FanOutWithoutAck) has no clustering group: each member
keeps progress of its own in each partition, and the partition's dispatch mark ``fan``
is where the next member to join starts — everything below it was handed to some member.
Its max size and overflow count what no member was handed yet, ``next − max(min, fan)``
(:mod:`.overflow`): that is the queue's ``message_count``. A message below the mark is
complete once every member settled it (vibemq.md §9.1); until then it counts in flight:
``max(min, fan) − max(min, slowest member's ack)``. The backlog is both.

One script per partition reads the meta and every member's ack (all under the
partition's hash tag), all partitions in one pipelined round trip whatever the number of
members.
"""

from __future__ import annotations

from collections.abc import Sequence

from brokers.engine.groups import GroupStats
from brokers.engine.keys import PartitionKeys
from brokers.engine.redisio import AnyRedis, Script, run_pipelined

FAN_OUT_STATS = Script(
    """
-- KEYS: meta, then the state hash of each member. Returns {min, next, dropped, mark, the
-- slowest member's ack (the mark without members)}.
local m = redis.call('HMGET', KEYS[1], 'min', 'next', 'dropped', 'fan')
local mn, nxt = tonumber(m[1] or '0'), tonumber(m[2] or '0')
local mark = math.max(mn, tonumber(m[4] or '0'))
local slowest = mark
for k = 2, #KEYS do
  local a = tonumber(redis.call('HGET', KEYS[k], 'ack') or '')
  if a and a < slowest then slowest = a end
end
if slowest < mn then slowest = mn end
return {s(mn), s(nxt), m[3] or '0', s(mark), s(slowest)}
"""
)


async def fan_out_stats(
    client: AnyRedis, topic: str, partitions: Sequence[int] | range, members: Sequence[str]
) -> GroupStats:
    """:class:`GroupStats` of a fan-out queue whose members' consumer ids are ``members``:
    its backlog is every incomplete message, of which ``in_flight`` were handed to some
    member (so ``message_count`` is what no member was handed yet: the overflow's count)."""
    calls = []
    for p in partitions:
        keys = PartitionKeys(topic, p)
        calls.append(((keys.meta, *(keys.state(cid) for cid in members)), ()))
    backlog = in_flight = dropped = stored = 0
    for raw in await run_pipelined(client, FAN_OUT_STATS, calls):
        mn, nxt, dr, mark, slowest = (int(x) for x in raw)
        handed = max(0, min(mark, nxt) - slowest)
        backlog += max(0, nxt - mark) + handed
        in_flight += handed
        dropped += dr
        stored += nxt - mn
    return GroupStats(backlog, in_flight, 0, dropped, stored)
