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

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from brokers.engine.ack import COMMIT_FN, MERGE_FN, CommitCall, commit_result
from brokers.engine.consume import FETCH_FN, FOUND, Attempt, fetch_keys
from brokers.engine.keys import PartitionKeys
from brokers.engine.model import CommitResult
from brokers.engine.read import READ_FN
from brokers.engine.redisio import AnyRedis, Script

FETCH_ANY_FN = """
-- fetch_any(K, kb, n, A, ab): choose, lock and read one of n partitions. K[kb + 1 ..
-- kb + 7n] are the seven keys of fetch_keys() for each partition; A[ab + 1 ..] are owner,
-- now, timeout_ms, want, addr, init, max_store, turn, max_partition_num, report, cap, then
-- the n partition numbers in key order. With report '1' a partition whose ack index lies
-- outside it comes first and is locked over nothing (fetch_one's report).
-- Returns {1, partition, k, k untried partitions with a backlog, FETCH's reply...} or
-- {0, earliest lock expiry or 0, earliest blocked store time or 0, none lockable (0/1),
--  maxPartitionNum reached (0/1), lapsed[, partition looked at, its ack index, its next
--  index, first access (0/1), its access time]} (the last five when a partition was free:
--  the first in turn, whose access time and address are recorded — or, when this client's
--  access was recorded on a free one less than a second ago, that one, unwritten); a
-- lapsed lock found on a partition that then yielded nothing (a delay held its messages
-- back) is counted in FETCH's reply of the partition that won, or in `lapsed`.
local OUTSIDE = 2 ^ 53  -- the sort key of a partition whose ack index lies outside it
local ACCESS_EVERY = 1000  -- ms between two records of a fetch of nothing's access
local function fetch_any(K, kb, n, A, ab)
  local owner, now, init = A[ab + 1], tonumber(A[ab + 2]), A[ab + 6]
  local turn, maxp, report = tonumber(A[ab + 8]), tonumber(A[ab + 9]), A[ab + 10]
  local held, locked_any, lock_hint, blocked_hint, lapsed = 0, 0, 0, 0, 0
  local free_any = 0  -- a partition this fetch could lock (nothing kept it out)
  local cands = {}
  local look = nil  -- the first free partition in turn: where a fetch of nothing looked
  local seen = nil  -- the first free one in turn where this client's access is recent
  local addr = A[ab + 5]
  for i = 1, n do
    local meta, state = K[kb + 7 * i - 5], K[kb + 7 * i - 4]
    local p = tonumber(A[ab + 11 + i])
    local m = redis.call('HMGET', meta, 'min', 'next')
    local mn, nxt = tonumber(m[1] or '0'), tonumber(m[2] or '0')
    local st = redis.call('HMGET', state, 'ack', 'lo', 'le', 't', 'ip')
    local ack = tonumber(st[1])
    local first = 0
    if not ack then first = 1 end
    if not ack and init == 'latest' then
      -- pin 'latest' at the first access, or later messages would be skipped too
      ack = nxt
      redis.call('HSET', state, 'ack', s(ack))
    end
    if not ack then ack = mn end
    local outside = report == '1' and (ack > nxt or ack < mn)
    if ack > nxt and not outside then
      -- committed past the end: corrected to it, as fetch_one does (else nothing up to
      -- there would ever count as a backlog)
      ack = nxt
      redis.call('HSET', state, 'ack', s(ack))
    end
    local le = tonumber(st[3] or '0')
    local locked = le > now
    if locked and st[2] == owner then held = held + 1 end
    local rot = (p - turn) % n
    if not locked then
      local t = tonumber(st[4] or '0')
      if look == nil or rot < look[1] then look = {rot, state, p, ack, nxt, first, t, st[5]} end
      if now - t < ACCESS_EVERY and (addr == '' or st[5] == addr)
          and (seen == nil or rot < seen[1]) then
        seen = {rot, state, p, ack, nxt, first, t, st[5]}
      end
    end
    local from = ack
    if from < mn then from = mn end
    if outside and not locked then
      cands[#cands + 1] = {OUTSIDE, (p - turn) % n, i, p}  -- reported before any backlog
    elseif nxt - from > 0 then
      if locked then
        locked_any = 1
        if lock_hint == 0 or le < lock_hint then lock_hint = le end
      else
        cands[#cands + 1] = {nxt - from, (p - turn) % n, i, p}
      end
    elseif not locked then
      free_any = 1  -- free and at its end: lockable, nothing to read
    end
  end
  if maxp > 0 and held >= maxp then return {0, s(lock_hint), '0', locked_any, 1, 0} end
  table.sort(cands, function(a, b)
    if a[1] ~= b[1] then return a[1] > b[1] end
    if a[2] ~= b[2] then return a[2] < b[2] end
    return a[3] < b[3]
  end)
  for j, c in ipairs(cands) do
    local b = kb + 7 * (c[3] - 1)
    local res = fetch_one(K[b + 1], K[b + 2], K[b + 3], {K[b + 4], K[b + 5], K[b + 6], K[b + 7]},
      owner, now, A[ab + 3], A[ab + 4], A[ab + 5], init, A[ab + 7], report, A[ab + 11])
    if res[1] == 1 then
      res[8] = s(tonumber(res[8]) + lapsed)
      local out = {1, c[4], #cands - j}
      for k = j + 1, #cands do out[#out + 1] = cands[k][4] end
      for _, v in ipairs(res) do out[#out + 1] = v end
      return out
    elseif res[1] == -1 then
      locked_any = 1
      local le = tonumber(res[2])
      if lock_hint == 0 or le < lock_hint then lock_hint = le end
    else
      free_any = 1
      local bl = tonumber(res[5])
      if bl > 0 and (blocked_hint == 0 or bl < blocked_hint) then blocked_hint = bl end
      lapsed = lapsed + tonumber(res[6])
    end
  end
  if free_any == 1 then locked_any = 0 end  -- "locked": no partition could be locked
  if look == nil then return {0, s(lock_hint), s(blocked_hint), locked_any, 0, lapsed} end
  -- nothing found: the access is recorded where the fetch looked first (http-mq.md §9
  -- step 8: t and ip also on NO_NEW_MSG), and that partition's position reported; at
  -- most once a second per client over the group's partitions: while one of them holds
  -- this client's access from less than a second ago, that one is reported and nothing
  -- is written (an idle consumer polling fast, its turn moving on each time, wrote once
  -- per poll)
  local at = now
  if seen ~= nil then look = seen; at = seen[7]
  elseif addr ~= '' then redis.call('HSET', look[2], 't', s(now), 'ip', addr)
  else redis.call('HSET', look[2], 't', s(now)) end
  return {0, s(lock_hint), s(blocked_hint), locked_any, 0, lapsed,
    look[3], s(look[4]), s(look[5]), look[6], s(at)}
end
"""

FETCH_ANY = Script(
    READ_FN
    + FETCH_FN
    + FETCH_ANY_FN
    + """
-- KEYS: the seven keys of fetch_keys() for each partition. ARGV: fetch_any's arguments.
return fetch_any(KEYS, 0, #KEYS / 7, ARGV, 0)
"""
)

COMMIT_FETCH_ANY = Script(
    READ_FN
    + FETCH_FN
    + FETCH_ANY_FN
    + MERGE_FN
    + COMMIT_FN
    + """
-- An HTTP-MQ request in one call: commit the previous batch, fetch the next, and pop the
-- queued resends unless every partition with messages was locked (the request then
-- fails, and the resends must wait for the next one). Each step exactly as its own script.
-- KEYS: [the commit's state, oo and meta keys], fetch_any's keys, [the resend list].
-- ARGV: commits (0/1), resend limit (0: none), [the commit's seven arguments],
-- fetch_any's arguments. Returns {commit reply or false, fetch_any's reply, the popped
-- resends (a list, maybe empty) or false when not popped}.
local commits, limit = ARGV[1] == '1', tonumber(ARGV[2])
local kb, ab = 0, 2
local c = false
if commits then
  c = commit_one(KEYS[1], KEYS[2], KEYS[3], ARGV, 2)
  kb, ab = 3, 9
end
local n = (#KEYS - kb - (limit > 0 and 1 or 0)) / 7
local f = fetch_any(KEYS, kb, n, ARGV, ab)
local r = false
if limit > 0 and (f[1] == 1 or (f[4] == 0 and f[5] == 0)) then
  r = redis.call('LPOP', KEYS[#KEYS], limit) or {}
end
return {c, f, r}
"""
)


@functools.lru_cache(maxsize=1024)
def scan_keys(topic: str, partitions: tuple[int, ...], cid: str) -> tuple[str, ...]:
    """The keys :data:`FETCH_ANY` reads for consumer ``cid`` over ``partitions`` (seven per
    partition), kept for the busiest consumers: a fetch of 8 partitions builds 56."""
    keys: list[str] = []
    for p in partitions:
        keys += fetch_keys(PartitionKeys(topic, p), cid)
    return tuple(keys)


@dataclass(frozen=True, slots=True)
class Looked:
    """Where a fetch that found nothing looked first (the first free partition in turn),
    as it stood: its access was recorded there."""

    partition: int
    ack_index: int
    max_index: int
    first_consume: bool
    accessed_ms: int  # the access time recorded there (at most a second old: see fetch_any)


@dataclass(frozen=True, slots=True)
class ScanOutcome:
    """What :func:`fetch_any` found: a locked partition with messages, or why not; with
    the outcome of the commit it ran first and the resends it popped, when asked to."""

    partition: int = -1
    attempt: Attempt | None = None
    untried: tuple[int, ...] = ()  # other partitions with a backlog
    lock_expiry: int = 0  # earliest expiry of a lock that kept messages back (0: none)
    blocked: int = 0  # earliest store time held back by a consumer delay (0: none)
    locked: bool = False
    """No partition could be locked: each was locked by another client or kept out (a
    consumer of another protocol holds its messages); False when one was free, empty or
    not (http-mq.md §9: 503 only when no queue could be locked)."""
    at_max_partitions: bool = False
    lapsed: int = 0  # what lapsed locks left unacked on partitions that yielded nothing
    commit: CommitResult | None = None
    resends: list[bytes] | None = None  # popped resend entries; None: not asked or not popped
    looked: Looked | None = None  # nothing found: where it looked first (None: all locked)


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
    report_correction: bool = False,
    max_bytes: int = 0,
    commit: CommitCall | None = None,
    resends: tuple[str, int] | None = None,
) -> ScanOutcome:
    """Run :data:`FETCH_ANY` over ``partitions`` (a single Redis only). With ``commit``
    (run first) or ``resends`` (the resend list's key and how many to pop, after), the
    three run as ONE script call: :data:`COMMIT_FETCH_ANY`. ``report_correction`` and
    ``max_bytes``: see :func:`brokers.engine.consume.try_partition`."""
    keys = list(scan_keys(topic, tuple(partitions), cid))
    if commit is not None:
        keys[:0] = commit.keys
    args: list[Any] = [
        owner,
        now_ms,
        timeout_ms,
        count,
        address,
        init,
        "" if max_store_ms is None else max_store_ms,
        turn,
        max_partition_num,
        1 if report_correction else 0,
        max_bytes,
        *partitions,
    ]
    committed: CommitResult | None = None
    popped: list[bytes] | None = None
    if commit is None and resends is None:
        raw = await FETCH_ANY(client, keys, args)
    else:
        head: list[Any] = [1 if commit is not None else 0, resends[1] if resends else 0]
        if commit is not None:
            head += commit.args
        if resends is not None:
            keys.append(resends[0])
        c, raw, r = await COMMIT_FETCH_ANY(client, keys, head + args)
        committed = commit_result(c) if commit is not None else None
        popped = list(r) if r is not None else None
    if int(raw[0]) != FOUND:
        return ScanOutcome(
            lock_expiry=int(raw[1]),
            blocked=int(raw[2]),
            locked=bool(int(raw[3])),
            at_max_partitions=bool(int(raw[4])),
            lapsed=int(raw[5]),
            commit=committed,
            resends=popped,
            looked=Looked(int(raw[6]), int(raw[7]), int(raw[8]), bool(int(raw[9])), int(raw[10]))
            if len(raw) > 6
            else None,
        )
    partition, k = int(raw[1]), int(raw[2])
    untried = tuple(int(x) for x in raw[3 : 3 + k])
    return ScanOutcome(
        partition=partition,
        attempt=Attempt(partition, raw[3 + k :]),
        untried=untried,
        commit=committed,
        resends=popped,
    )
