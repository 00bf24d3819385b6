"""Choosing, locking and reading a consumer group's partition in ONE script (single Redis).

On Redis Cluster each partition lives in its own slot, so a fetch reads every partition's
state in a pipeline and then runs the lock-and-read script on the chosen one (two round
trips). On a single Redis all keys are on one server, and :data:`FETCH_ANY` does both
steps — with exactly the rules of :meth:`brokers.engine.fetch.Fetcher._scan`: pin
'latest' at first access, count the caller's held locks against ``maxPartitionNum``,
order partitions with a backlog by backlog (largest first, ties rotated by ``turn``),
skip locked ones and take the first that yields messages.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from brokers.engine.consume import FETCH_FN, FOUND, Attempt, fetch_keys
from brokers.engine.keys import PartitionKeys
from brokers.engine.read import READ_FN
from brokers.engine.redisio import AnyRedis, Script

FETCH_ANY = Script(
    READ_FN
    + FETCH_FN
    + """
-- KEYS: the six keys of fetch_keys() for each partition. ARGV: owner, now, timeout_ms, want, addr,
-- init, max_store, turn, max_partition_num, then the partition numbers in KEYS order.
-- Returns {1, partition, k, k untried partitions with a backlog, FETCH's reply...} or
-- {0, earliest lock expiry or 0, earliest blocked store time or 0, locked (0/1),
--  maxPartitionNum reached (0/1)}.
local owner, now, init = ARGV[1], tonumber(ARGV[2]), ARGV[6]
local turn, maxp = tonumber(ARGV[8]), tonumber(ARGV[9])
local n = #KEYS / 6
local held, locked_any, lock_hint, blocked_hint = 0, 0, 0, 0
local cands = {}
for i = 1, n do
  local meta, state = KEYS[6 * i - 4], KEYS[6 * i - 3]
  local p = tonumber(ARGV[9 + i])
  local m = redis.call('HMGET', meta, 'min', 'next')
  local mn, nxt = tonumber(m[1] or '0'), tonumber(m[2] or '0')
  local st = redis.call('HMGET', state, 'ack', 'lo', 'le')
  local ack = tonumber(st[1])
  if not ack and init == 'latest' then
    -- pin 'latest' at the first access, or later messages would be skipped too
    ack = nxt
    redis.call('HSET', state, 'ack', s(ack))
  end
  if not ack then ack = mn end
  local le = tonumber(st[3] or '0')
  local locked = le > now
  if locked and st[2] == owner then held = held + 1 end
  local from = ack
  if from < mn then from = mn end
  if nxt - from > 0 then
    if locked then
      locked_any = 1
      if lock_hint == 0 or le < lock_hint then lock_hint = le end
    else
      cands[#cands + 1] = {nxt - from, (p - turn) % n, i, p}
    end
  end
end
if maxp > 0 and held >= maxp then return {0, s(lock_hint), '0', locked_any, 1} end
table.sort(cands, function(a, b)
  if a[1] ~= b[1] then return a[1] > b[1] end
  if a[2] ~= b[2] then return a[2] < b[2] end
  return a[3] < b[3]
end)
for j, c in ipairs(cands) do
  local i = c[3]
  local b = 6 * (i - 1)
  local res = fetch_one(KEYS[b + 1], KEYS[b + 2], KEYS[b + 3], {KEYS[b + 4], KEYS[b + 5], KEYS[b + 6]},
    owner, now, ARGV[3], ARGV[4], ARGV[5], init, ARGV[7])
  if res[1] == 1 then
    local out = {1, c[4], #cands - j}
    for k = j + 1, #cands do out[#out + 1] = cands[k][4] end
    for _, v in ipairs(res) do out[#out + 1] = v end
    return out
  elseif res[1] == -1 then
    locked_any = 1
    local le = tonumber(res[2])
    if lock_hint == 0 or le < lock_hint then lock_hint = le end
  else
    local b = tonumber(res[5])
    if b > 0 and (blocked_hint == 0 or b < blocked_hint) then blocked_hint = b end
  end
end
return {0, s(lock_hint), s(blocked_hint), locked_any, 0}
"""
)


@dataclass(frozen=True, slots=True)
class ScanOutcome:
    """What :func:`fetch_any` found: a locked partition with messages, or why not."""

    partition: int = -1
    attempt: Attempt | None = None
    untried: tuple[int, ...] = ()  # other partitions with a backlog
    lock_expiry: int = 0  # earliest expiry of a lock that kept messages back (0: none)
    blocked: int = 0  # earliest store time held back by a consumer delay (0: none)
    locked: bool = False
    at_max_partitions: bool = False


async def fetch_any(
    client: AnyRedis,
    topic: str,
    partitions: Sequence[int],
    cid: str,
    *,
    owner: str,
    now_ms: int,
    timeout_ms: int,
    count: int,
    address: str,
    init: str,
    max_store_ms: int | None,
    turn: int,
    max_partition_num: int,
) -> ScanOutcome:
    """Run :data:`FETCH_ANY` over ``partitions`` (a single Redis only)."""
    keys: list[str] = []
    for p in partitions:
        keys += fetch_keys(PartitionKeys(topic, p), cid)
    args = (
        owner,
        now_ms,
        timeout_ms,
        count,
        address,
        init,
        "" if max_store_ms is None else max_store_ms,
        turn,
        max_partition_num,
        *partitions,
    )
    raw = await FETCH_ANY(client, keys, args)
    if int(raw[0]) != FOUND:
        return ScanOutcome(
            lock_expiry=int(raw[1]),
            blocked=int(raw[2]),
            locked=bool(int(raw[3])),
            at_max_partitions=bool(int(raw[4])),
        )
    partition, k = int(raw[1]), int(raw[2])
    untried = tuple(int(x) for x in raw[3 : 3 + k])
    return ScanOutcome(
        partition=partition, attempt=Attempt(partition, raw[3 + k :]), untried=untried
    )
