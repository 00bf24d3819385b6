"""A priority topic's max size over all its bands: the bound counts the queue, not a band.

A ``PriorityBased`` topic keeps each band in a partition of its own (:mod:`.priority`),
each under its own hash tag (its own slot on a Redis Cluster), so no one script sees
every band. A bounded append to a band therefore reads the other bands first — each
one's meta and each clustering group's ack and cursor: one pipelined round trip of
bands × (1 + groups) commands, whatever the backlog — and hands their backlog to the
band's script (:mod:`.overflow`), which adds its own: BlockPublisher, DropNewest and
RedirectToDlq judge the backlog of the whole queue.

DropOldest drops the oldest queued messages of the whole queue by store time, whatever
band holds them (vibemq.md §9.2 "the oldest queued message"; §10: priority affects
ordering only), the lower band first on a tie: before the append, as many as the new
messages would put over the bound are dropped — per group, from its undelivered
messages (one in flight is never dropped); without groups the oldest stored — then the
other bands are read again for the band's script.

Between the read and the script another append or ack may come: publishes racing into
different bands each count the others' backlog from just before, and together may pass
the bound by the publishes in flight. Publishes one after another, or all into one band,
meet it exactly.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from brokers.engine.keys import PartitionKeys
from brokers.engine.model import QoS
from brokers.engine.overflow import COUNT_AT_LUA
from brokers.engine.record import record_store_time
from brokers.engine.redisio import AnyRedis, Durability, Script

DROP_OLDEST = "DropOldest"

DROP = Script(
    COUNT_AT_LUA
    + """
-- KEYS: stream, meta, then the state hash of one group (none: the oldest stored go).
-- ARGV: how many. The group skips that many of its oldest undelivered messages (or that
-- many oldest stored are trimmed), counted in the partition's dropped; returns how many.
local stream, meta = KEYS[1], KEYS[2]
local n = tonumber(ARGV[1])
local m = redis.call('HMGET', meta, 'min', 'next')
local mn, nxt = tonumber(m[1] or '0'), tonumber(m[2] or '0')
local done = 0
if KEYS[3] then
  local st = redis.call('HMGET', KEYS[3], 'ack', 'cur')
  local a = tonumber(st[1]) or mn
  if a < mn then a = mn end
  local cur = tonumber(st[2]) or a
  if cur < a then cur = a end
  local shared = redis.call('HGET', KEYS[3], 'sh')
  while done < n and cur < nxt do
    cur = cur + count_at(stream, cur)
    done = done + 1
  end
  if done > 0 then
    redis.call('HSET', KEYS[3], 'cur', s(cur))
    if not shared then redis.call('HSET', KEYS[3], 'ack', s(cur)) end
  end
else
  for _, e in ipairs(redis.call('XRANGE', stream, '-', '+', 'COUNT', n)) do
    local fi, c = first_of(e[1])
    redis.call('XDEL', stream, e[1])
    mn = fi + c
    done = done + 1
  end
  if done > 0 then redis.call('HSET', meta, 'min', s(mn)) end
end
if done > 0 then redis.call('HINCRBY', meta, 'dropped', done) end
return done
"""
)


@dataclass(frozen=True, slots=True)
class Band:
    """What the bound counts of one band: its floor (min), next index, and per group its
    ack index and cursor (first undelivered), both at least the floor."""

    partition: int
    floor: int
    next: int
    acks: tuple[int, ...]
    cursors: tuple[int, ...]

    def backlog(self, group: int | None) -> int:
        """Stored − acked of group number ``group`` (None: without groups, stored)."""
        return max(0, self.next - (self.floor if group is None else self.acks[group]))


async def read_bands(
    client: AnyRedis, topic: str, partitions: Sequence[int], group_ids: Sequence[str]
) -> list[Band]:
    """The :class:`Band` of each of ``partitions``, in one pipelined round trip."""
    pipe = client.pipeline(transaction=False)
    for p in partitions:
        keys = PartitionKeys(topic, p)
        pipe.hmget(keys.meta, "min", "next")
        for g in group_ids:
            pipe.hmget(keys.state(g), "ack", "cur")
    replies = iter(await pipe.execute())
    out = []
    for p in partitions:
        lo, hi = next(replies)
        floor = int(lo or 0)
        acks, cursors = [], []
        for _ in group_ids:
            ack, cur = next(replies)
            a = max(floor, int(ack) if ack is not None else floor)
            acks.append(a)
            cursors.append(max(a, int(cur) if cur is not None else a))
        out.append(Band(p, floor, int(hi or 0), tuple(acks), tuple(cursors)))
    return out


def elsewhere(bands: Sequence[Band], own: int, groups: int) -> list[int]:
    """The backlog outside partition ``own``: one number without groups, else one per group."""
    others = [b for b in bands if b.partition != own]
    if not groups:
        return [sum(b.backlog(None) for b in others)]
    return [sum(b.backlog(g) for b in others) for g in range(groups)]


async def _drop_oldest(
    client: AnyRedis,
    durability: Durability,
    topic: str,
    bands: Sequence[Band],
    group_ids: Sequence[str],
    *,
    units: int,
    max_size: int,
    qos: QoS,
) -> bool:
    """Drop, per group, the oldest queued messages of the whole queue that ``units`` new
    ones would put over ``max_size``; whether any went."""
    plans: list[tuple[int | None, int]] = []
    for g in range(len(group_ids)) if group_ids else [None]:
        total = sum(b.backlog(g) for b in bands)
        need = min(units, max(0, total + units - max_size))
        if need:
            plans.append((g, need))
    if not plans:
        return False
    pipe = client.pipeline(transaction=False)
    for g, need in plans:
        for b in bands:
            start = "-" if g is None else str(b.cursors[g])
            pipe.xrange(PartitionKeys(topic, b.partition).stream, start, "+", count=need)
    replies = iter(await pipe.execute())
    dropped = False
    for g, need in plans:
        heads = []
        for b in bands:
            for _, fields in next(replies):
                # the oldest first; on a tie the lower band (the higher partition) first
                heads.append((record_store_time(fields[b"m"]), -b.partition))
        chosen: dict[int, int] = {}
        for _, minus in sorted(heads)[:need]:
            chosen[-minus] = chosen.get(-minus, 0) + 1
        for partition, n in chosen.items():
            keys = PartitionKeys(topic, partition)
            state = () if g is None else (keys.state(group_ids[g]),)
            done = await durability.run(DROP, (keys.stream, keys.meta, *state), (n,), qos)
            dropped = dropped or int(done) > 0
    return dropped


async def backlog_elsewhere(
    client: AnyRedis,
    durability: Durability,
    topic: str,
    partitions: int,
    own: int,
    group_ids: Sequence[str],
    *,
    units: int,
    max_size: int,
    policy: str,
    qos: QoS,
) -> list[int]:
    """The backlog of a priority topic's bands other than ``own`` for the bounded append
    of ``units`` into ``own`` (:func:`~brokers.engine.overflow.append_bounded`'s
    ``elsewhere``), after dropping the queue's oldest under DropOldest."""
    bands = await read_bands(client, topic, range(partitions), group_ids)
    if policy == DROP_OLDEST and await _drop_oldest(
        client, durability, topic, bands, group_ids, units=units, max_size=max_size, qos=qos
    ):
        bands = await read_bands(client, topic, range(partitions), group_ids)
    return elsewhere(bands, own, len(group_ids))
