"""A bounded topic's max size and overflow policy, on the backlog of its consumer groups.

A topic with ``max_queue_size`` holds at most that many unsettled messages per partition:
the backlog is ``next − ack`` of its slowest clustering group (every consumer group of the
topic, whatever protocol consumes it), or ``next − min`` while it has none; a fan-out
queue counts what no member was handed yet (``next`` − its dispatch mark). Each message
of a publish meets the policy in turn, inside one script (so every protocol's producers
and consumers see the same numbers):

* ``DropOldest`` — each group at the bound skips its oldest undelivered message (counted
  in the partition's ``dropped``); without groups the oldest stored message is trimmed.
* ``DropNewest`` — the new message is dropped and counted.
* ``BlockPublisher`` — the new message is refused (:class:`QueueFull`).
* ``RedirectToDlq`` — the engine stores the new message in ``<topic>.dlq`` instead.

A message in flight is never dropped: with every backlog message leased, DropOldest
stores the new one over the bound. A priority topic's bound counts its other bands too,
read before the script (:mod:`.band_bound`).
"""

from __future__ import annotations

from collections.abc import Sequence

from brokers.engine.append import STAMP_LUA
from brokers.engine.keys import PartitionKeys, notify_channel
from brokers.engine.model import QoS
from brokers.engine.redisio import AnyRedis, Durability, Script

STORED, DROPPED, FULL, REDIRECT = "stored", "dropped", "full", "redirect"

COUNT_AT_LUA = """
local function count_at(stream, idx)
  -- how many indexes from idx to the end of the record holding it (a batch's items)
  local e = redis.call('XREVRANGE', stream, s(idx) .. '-18446744073709551615', '-', 'COUNT', 1)[1]
  if not e then return 1 end
  local fi, c = first_of(e[1])
  if fi + c <= idx then return 1 end
  return fi + c - idx
end
"""

APPEND_BOUNDED = Script(
    STAMP_LUA
    + COUNT_AT_LUA
    + """
-- KEYS: stream, meta, then the state hash of each clustering group.
-- ARGV: channel, partition, max_size, policy, the backlog elsewhere (the other bands of a
-- priority topic: 'n' without groups, or one 'n' per group in KEYS order, comma-separated;
-- '' none), then count, records per unit (a message, or the records of one atomic append
-- concatenated). Returns per unit: the index it was stored at, or 'dropped' | 'full' | 'redirect'.
local stream, meta = KEYS[1], KEYS[2]
local max_size, policy = tonumber(ARGV[3]), ARGV[4]
local elsewhere = {}
for n in string.gmatch(ARGV[5], '%d+') do elsewhere[#elsewhere + 1] = tonumber(n) end
local function other(k) return elsewhere[k] or 0 end
local m = redis.call('HMGET', meta, 'min', 'next', 'fan')
local mn, nxt, fan = tonumber(m[1] or '0'), tonumber(m[2] or '0'), tonumber(m[3] or '0')
local function ack_of(state)
  local st = redis.call('HMGET', state, 'ack', 'cur')
  local a = tonumber(st[1]) or mn
  if a < mn then a = mn end
  return a, tonumber(st[2])
end
-- the records of one unit (a message, or an atomic batch of records) get their indexes
-- with stamp() (append.STAMP_LUA), unless the caller guessed them right: its first
-- record's index field (bytes 7-14) already holds the index the unit is stored at
local out, stored = {}, 0
for i = 6, #ARGV, 2 do
  local floor = math.max(mn, fan)  -- without groups: what no fan-out member was handed yet
  local backlog = nxt - floor + other(1)
  if #KEYS > 2 then
    backlog = 0
    for k = 3, #KEYS do
      local a = ack_of(KEYS[k])
      if nxt - a + other(k - 2) > backlog then backlog = nxt - a + other(k - 2) end
    end
  end
  local verdict = nil
  if backlog >= max_size then
    if policy == 'DropNewest' then verdict = 'dropped'
    elseif policy == 'BlockPublisher' then verdict = 'full'
    elseif policy == 'RedirectToDlq' then verdict = 'redirect'
    elseif #KEYS > 2 then
      for k = 3, #KEYS do
        local a, cur = ack_of(KEYS[k])
        if nxt - a + other(k - 2) >= max_size then
          cur = cur or a
          if cur < a then cur = a end
          if cur < nxt then
            local nc = cur + count_at(stream, cur)
            redis.call('HSET', KEYS[k], 'cur', s(nc))
            if not redis.call('HGET', KEYS[k], 'sh') then redis.call('HSET', KEYS[k], 'ack', s(nc)) end
            redis.call('HINCRBY', meta, 'dropped', 1)
          end
        end
      end
    elseif fan > mn and floor < nxt then
      -- a fan-out queue: the oldest message not handed to any member is skipped
      fan = floor + count_at(stream, floor)
      redis.call('HSET', meta, 'fan', s(fan))
      redis.call('HINCRBY', meta, 'dropped', 1)
    elseif mn < nxt then
      local e = redis.call('XRANGE', stream, '-', '+', 'COUNT', 1)[1]
      if e then
        local fi, c = first_of(e[1])
        redis.call('XDEL', stream, e[1])
        mn = fi + c
        redis.call('HSET', meta, 'min', s(mn))
        redis.call('HINCRBY', meta, 'dropped', 1)
      end
    end
  end
  if verdict then
    if verdict == 'dropped' then redis.call('HINCRBY', meta, 'dropped', 1) end
    out[#out + 1] = verdict
  else
    local unit = ARGV[i + 1]
    if struct.unpack('>i8', unit, 7) ~= nxt then unit = stamp(unit, nxt) end
    redis.call('XADD', stream, s(nxt) .. '-' .. ARGV[i], 'm', unit)
    out[#out + 1] = s(nxt)
    nxt = nxt + tonumber(ARGV[i]); stored = stored + 1
  end
end
if stored > 0 then
  redis.call('HSET', meta, 'next', s(nxt))
  redis.call('HSETNX', meta, 'min', '0')
  redis.call('PUBLISH', ARGV[1], ARGV[2])
end
return out
"""
)


async def append_bounded(
    client: AnyRedis,
    durability: Durability,
    topic: str,
    partition: int,
    group_ids: Sequence[str],
    records: Sequence[tuple[bytes, int]],
    *,
    max_size: int,
    policy: str,
    qos: QoS,
    notice: str | None = None,
    elsewhere: Sequence[int] = (),
) -> list[int | str]:
    """Store ``(records, count)`` units one by one under the bound (a unit is one message,
    or an atomic append's records concatenated); per unit the index it got or its verdict
    (:data:`DROPPED`, :data:`FULL`, :data:`REDIRECT`). Units whose records already carry
    the indexes they get are stored as they are; the others are rewritten in Lua.
    ``elsewhere``: the backlog the bound counts outside this partition (a priority topic's
    other bands, :mod:`.bands`): one number without groups, else one per group."""
    keys = PartitionKeys(topic, partition)
    said = partition if notice is None else notice  # see Notifier.claim
    args: list[object] = [
        notify_channel(topic),
        said,
        max_size,
        policy,
        ",".join(str(max(0, int(n))) for n in elsewhere),
    ]
    for record, count in records:
        args += [count, record]
    raw = await durability.run(
        APPEND_BOUNDED, (keys.stream, keys.meta, *(keys.state(g) for g in group_ids)), args, qos
    )
    return [x.decode() if isinstance(x, bytes) and not x.isdigit() else int(x) for x in raw]
