"""Retry store and dead-letter queue per (app, topic), all in slot ``{r:<topic>:<app>}``.

A failed message (JMQ4 ack with retryType ≠ NONE, an explicit ``retry`` call, a queue
delivery that timed out) is copied here with a new retry id (a batch of n items takes n
ids, stored once at the first). Retries are due at ``now + base · 2^(attempt−1)``, capped;
a delivery leases the record for the ack timeout (it comes back if not acked). A failed
attempt past ``max_attempts`` (0 = unlimited), or a record older than ``max_age_ms``,
moves to the dead-letter queue with its reason — nothing is dropped silently. Operators
list, resend (back into the retry store, due now), skip (delete chosen ids) and purge.

A broadcast client has retries of its own (what it failed, what was re-consumed for it:
its progress is its own, so another client must not get them), in the same slot
(:class:`~brokers.engine.keys.RetryKeys` ``member``); their ids come from the group's
sequence and they die into the group's dead-letter queue.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from brokers.engine.keys import RetryKeys, consumer_id, notify_channel
from brokers.engine.model import RetryRecord
from brokers.engine.read import PULL_READ_BYTES
from brokers.engine.record import decode_record
from brokers.engine.redisio import AnyRedis, Script
from brokers.engine.unbatch import split_batches

_MOVE_FN = """
local function to_dlq(K, id, now, reason)
  local meta = redis.call('HGET', K.meta, id)
  local data = redis.call('HGET', K.data, id)
  redis.call('ZREM', K.due, id)
  redis.call('HDEL', K.meta, id)
  redis.call('HDEL', K.data, id)
  if not meta then return 0 end
  local a, p, i, c, n = string.match(meta, '^(%-?%d+)|(%-?%d+)|(%-?%d+)|(%-?%d+)|(%d+)|')
  redis.call('ZADD', K.dlq, s(now), id)
  redis.call('HSET', K.dlqd, id, data)
  redis.call('HSET', K.dlqm, id, a .. '|' .. p .. '|' .. i .. '|' .. c .. '|' .. n .. '|' .. reason)
  return 1
end
local K = {due = KEYS[1], data = KEYS[2], meta = KEYS[3], seq = KEYS[4],
           dlq = KEYS[5], dlqd = KEYS[6], dlqm = KEYS[7]}
"""

ADD = Script(
    _MOVE_FN
    + """
-- ARGV: now, due_at, reason, then (partition, index, count, record) quadruples.
local now, due_at, reason = tonumber(ARGV[1]), ARGV[2], ARGV[3]
local ids = {}
for j = 4, #ARGV, 4 do
  local c = tonumber(ARGV[j + 2])
  local last = redis.call('INCRBY', K.seq, c)
  local id = s(last - c + 1)
  redis.call('HSET', K.data, id, ARGV[j + 3])
  redis.call('HSET', K.meta, id, '1|' .. ARGV[j] .. '|' .. ARGV[j + 1] .. '|' .. s(now) .. '|' .. s(c) .. '|' .. reason)
  redis.call('ZADD', K.due, due_at, id)
  ids[#ids + 1] = id
end
return ids
"""
)

LEASE = Script(
    _MOVE_FN
    + """
-- ARGV: now, lease_until, max items, max_age_ms (0 = none), max record bytes (at least one
-- record is leased). Returns flat (id, meta, record) triples, or (when none is due) the
-- due time of the earliest retry alone, or nothing.
-- KEYS[8], when given: the lessee's holder set (RetryKeys.held), which records each lease.
local now, lease, want, max_age = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local cap = tonumber(ARGV[5])
local held = KEYS[8]
local out = {}
local items, bytes = 0, 0
local due = redis.call('ZRANGEBYSCORE', K.due, '-inf', s(now), 'LIMIT', 0, want)
for _, id in ipairs(due) do
  local meta = redis.call('HGET', K.meta, id)
  local created = tonumber(string.match(meta or '', '^%-?%d+|%-?%d+|%-?%d+|(%-?%d+)|') or now)
  if max_age > 0 and created + max_age < now then
    to_dlq(K, id, now, 'Expired')
  elseif meta then
    local data = redis.call('HGET', K.data, id)
    local size = data and #data or 0
    if items > 0 and bytes + size > cap then break end  -- the rest stays due
    redis.call('ZADD', K.due, lease, id)
    if held then redis.call('ZADD', held, lease, id) end
    out[#out + 1] = id; out[#out + 1] = meta; out[#out + 1] = data
    items, bytes = items + 1, bytes + size
  else
    redis.call('ZREM', K.due, id)
  end
end
if held and items > 0 then
  -- leases that ended are expiry's to hand on; the set outlives its last lease a minute
  redis.call('ZREMRANGEBYSCORE', held, '-inf', s(now))
  local keep = tonumber(lease) - now + 60000
  if redis.call('PTTL', held) < keep then redis.call('PEXPIRE', held, s(keep)) end
end
if items == 0 then
  -- nothing leased: the earliest due time instead, so a fetcher knows when to look again
  local first = redis.call('ZRANGE', K.due, 0, 0, 'WITHSCORES')
  if first[2] then out[1] = first[2] end
end
return out
"""
)

SETTLE = Script(
    _MOVE_FN
    + """
-- ARGV: now, ok (1/0), base_ms, cap_ms, max_attempts, reason, ids...
-- KEYS[8], when given: the settling holder's set (RetryKeys.held), which forgets the ids.
local now, ok = tonumber(ARGV[1]), ARGV[2] == '1'
local base, cap, maxa, reason = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]), ARGV[6]
local done, dead = 0, 0
for j = 7, #ARGV do
  local id = ARGV[j]
  if KEYS[8] then redis.call('ZREM', KEYS[8], id) end
  local meta = redis.call('HGET', K.meta, id)
  if meta then
    done = done + 1
    if ok then
      redis.call('ZREM', K.due, id); redis.call('HDEL', K.meta, id); redis.call('HDEL', K.data, id)
    else
      local a, rest = string.match(meta, '^(%-?%d+)(|.*)$')
      local attempts = tonumber(a) + 1
      if maxa > 0 and attempts > maxa then
        redis.call('HSET', K.meta, id, s(attempts) .. rest)
        to_dlq(K, id, now, reason)
        dead = dead + 1
      else
        local delay = base * (2 ^ (attempts - 1))
        if cap > 0 and delay > cap then delay = cap end
        redis.call('HSET', K.meta, id, s(attempts) .. rest)
        redis.call('ZADD', K.due, s(now + delay), id)
      end
    end
  end
end
return {done, dead}
"""
)

RELEASE_HELD = Script(
    _MOVE_FN
    + """
-- KEYS[8]: a holder's set (RetryKeys.held). ARGV: now, ids... The retries among ids (none:
-- all, for a gone holder, and the set goes) it still holds (their lease not over, nor
-- settled or leased again since) are due at once.
local now = tonumber(ARGV[1])
local held = {}
if #ARGV == 1 then
  held = redis.call('ZRANGEBYSCORE', KEYS[8], '(' .. s(now), '+inf', 'WITHSCORES')
  redis.call('DEL', KEYS[8])
else
  for j = 2, #ARGV do
    local at = redis.call('ZSCORE', KEYS[8], ARGV[j])
    if at and tonumber(at) > now then held[#held + 1] = ARGV[j]; held[#held + 1] = at end
    redis.call('ZREM', KEYS[8], ARGV[j])
  end
end
local n = 0
for j = 1, #held, 2 do
  local at = redis.call('ZSCORE', K.due, held[j])
  if at and tonumber(at) == tonumber(held[j + 1]) then
    redis.call('ZADD', K.due, s(now), held[j])
    n = n + 1
  end
end
return n
"""
)

DLQ_ADD = Script(
    _MOVE_FN
    + """
-- ARGV: now, reason, then (partition, index, count, record, attempts). Straight to the DLQ.
local now, reason = tonumber(ARGV[1]), ARGV[2]
local ids = {}
for j = 3, #ARGV, 5 do
  local c = tonumber(ARGV[j + 2])
  local last = redis.call('INCRBY', K.seq, c)
  local id = s(last - c + 1)
  redis.call('ZADD', K.dlq, s(now), id)
  redis.call('HSET', K.dlqd, id, ARGV[j + 3])
  redis.call('HSET', K.dlqm, id, ARGV[j + 4] .. '|' .. ARGV[j] .. '|' .. ARGV[j + 1] .. '|' .. s(now) .. '|' .. s(c) .. '|' .. reason)
  ids[#ids + 1] = id
end
return ids
"""
)

DLQ_RESEND = Script(
    _MOVE_FN
    + """
-- ARGV: now, ids... (none = all). Dead letters go back to the retry store, due now.
local now = ARGV[1]
local ids = {}
for j = 2, #ARGV do ids[#ids + 1] = ARGV[j] end
if #ids == 0 then ids = redis.call('ZRANGE', K.dlq, 0, -1) end
local moved = 0
for _, id in ipairs(ids) do
  local meta = redis.call('HGET', K.dlqm, id)
  if meta then
    local rest = string.match(meta, '^%-?%d+|(%-?%d+|%-?%d+|)')
    local c = string.match(meta, '^%-?%d+|%-?%d+|%-?%d+|%-?%d+|(%d+)|')
    redis.call('HSET', K.data, id, redis.call('HGET', K.dlqd, id))
    redis.call('HSET', K.meta, id, '0|' .. rest .. now .. '|' .. c .. '|Resent')
    redis.call('ZADD', K.due, now, id)
    redis.call('ZREM', K.dlq, id); redis.call('HDEL', K.dlqd, id); redis.call('HDEL', K.dlqm, id)
    moved = moved + 1
  end
end
return moved
"""
)

REMOVE = Script(
    _MOVE_FN
    + """
-- ARGV: which ('retry'|'dlq'), before_ms (or ''), ids... (none = all before before_ms)
local z, d, m = K.due, K.data, K.meta
if ARGV[1] == 'dlq' then z, d, m = K.dlq, K.dlqd, K.dlqm end
local ids = {}
for j = 3, #ARGV do ids[#ids + 1] = ARGV[j] end
if #ids == 0 then
  if ARGV[2] == '' then ids = redis.call('ZRANGE', z, 0, -1)
  else ids = redis.call('ZRANGEBYSCORE', z, '-inf', '(' .. ARGV[2]) end
end
local n = 0
for _, id in ipairs(ids) do
  n = n + redis.call('ZREM', z, id)
  redis.call('HDEL', d, id); redis.call('HDEL', m, id)
end
return n
"""
)

DUE_NOW = Script(
    _MOVE_FN
    + """
-- ARGV: now, ids... (none = all): make retries due now.
local ids = {}
for j = 2, #ARGV do ids[#ids + 1] = ARGV[j] end
if #ids == 0 then ids = redis.call('ZRANGE', K.due, 0, -1) end
local n = 0
for _, id in ipairs(ids) do
  if redis.call('ZSCORE', K.due, id) then redis.call('ZADD', K.due, ARGV[1], id); n = n + 1 end
end
return n
"""
)


def _keys(k: RetryKeys) -> tuple[str, ...]:
    return (k.due, k.data, k.meta, k.seq, k.dlq, k.dlq_data, k.dlq_meta)


def _created_ms(meta: bytes | str) -> int:
    """When a retry came into the store, from its meta (``attempts|partition|index|
    created|count|reason``)."""
    text = meta.decode() if isinstance(meta, bytes) else meta
    return int(text.split("|", 4)[3])


def _record(rid: int, meta: bytes | str, data: bytes, score: float) -> RetryRecord:
    text = meta.decode() if isinstance(meta, bytes) else meta
    attempts, partition, index, created, _count, reason = text.split("|", 5)
    return RetryRecord(
        id=rid,
        partition=int(partition),
        index=int(index),
        attempts=int(attempts),
        created_ms=int(created),
        reason=reason,
        due_ms=int(score),
        record=data,
    )


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Backoff and limits of the retry store."""

    base_ms: int = 1_000
    cap_ms: int = 3_600_000
    max_attempts: int = 16
    max_age_ms: int = 3 * 24 * 3_600_000


class RetryStore:
    """Retry store + DLQ of one (topic, app), or the retries of one broadcast client of it
    (``member``: its own retries, the group's dead letters)."""

    def __init__(
        self,
        client: AnyRedis,
        topic: str,
        app: str,
        on_change: Callable[[str, str], None] | None = None,
        *,
        member: str | None = None,
    ) -> None:
        self._client = client
        self._topic = topic
        self.owner = consumer_id(app, member)
        """Whose retries these are: the group (its app) or a member (``app#clientId``)."""
        self._on_change = on_change
        self.keys = RetryKeys(topic, app, member)

    @functools.cached_property
    def _k(self) -> tuple[str, ...]:
        """The scripts' keys, made at the first call that needs them: a lease only looks
        at :class:`~brokers.engine.retry_presence.RetryPresence` by :attr:`owner` first,
        and most leases stop there."""
        return _keys(self.keys)

    async def _wake_fetchers(self) -> None:
        """Tell parked fetches of the topic to look again (a notification naming no
        partition): a retry was added or made due, and they would not see it otherwise
        before their long poll ends. ``on_change`` hears of it first (this process's
        :class:`~brokers.engine.retry_presence.RetryPresence`, which needs no
        notification for its own changes)."""
        if self._on_change is not None:
            self._on_change(self._topic, self.owner)
        await self._client.publish(notify_channel(self._topic), "retry")

    async def add(
        self,
        items: Sequence[tuple[int, int, int, bytes]],
        *,
        now_ms: int,
        due_ms: int,
        reason: str,
    ) -> list[int]:
        """Store (partition, index, count, record) copies — a JMQ4 batch as its items, each
        a retry of its own (:func:`~brokers.engine.unbatch.split_batches`); returns their
        retry ids."""
        args: list[object] = [now_ms, due_ms, reason]
        for partition, index, count, record in split_batches(items):
            args += [partition, index, count, record]
        ids = [int(x) for x in await ADD(self._client, self._k, args)]
        await self._wake_fetchers()
        return ids

    async def dead_letter(
        self,
        items: Sequence[tuple[int, int, int, bytes]],
        *,
        now_ms: int,
        reason: str,
        attempts: int = 0,
    ) -> list[int]:
        """Put (partition, index, count, record) straight into the DLQ (a JMQ4 batch as
        its items, each a dead letter of its own)."""
        args: list[object] = [now_ms, reason]
        for partition, index, count, record in split_batches(items):
            args += [partition, index, count, record, attempts]
        return [int(x) for x in await DLQ_ADD(self._client, self._k, args)]

    async def lease(
        self,
        *,
        now_ms: int,
        lease_ms: int,
        max_items: int,
        policy: RetryPolicy,
        max_bytes: int = PULL_READ_BYTES,
    ) -> list[tuple[int, int, int, int, int, bytes]]:
        """Due retries, leased until ``now + lease_ms``: (id, partition, index, count, attempts, record)."""
        leased, _ = await self.lease_or_next_due(
            now_ms=now_ms,
            lease_ms=lease_ms,
            max_items=max_items,
            policy=policy,
            max_bytes=max_bytes,
        )
        return leased

    def _with_held(self, holder: str | None) -> tuple[str, ...]:
        return self._k if holder is None else (*self._k, self.keys.held(holder))

    async def lease_or_next_due(
        self,
        *,
        now_ms: int,
        lease_ms: int,
        max_items: int,
        policy: RetryPolicy,
        holder: str | None = None,
        max_bytes: int = PULL_READ_BYTES,
    ) -> tuple[list[tuple[int, int, int, int, int, bytes]], int | None]:
        """:meth:`lease`, and when nothing was due, the due time of the earliest retry
        (None if the store is empty) — one round trip for a fetch that finds nothing.
        A lease for a ``holder`` (:mod:`~brokers.engine.holders`) is recorded under it,
        so that :meth:`release_held` hands it on when the holder is gone. At most
        ``max_items`` records and ``max_bytes`` of them (at least one record): the rest
        stays due."""
        flat = await LEASE(
            self._client,
            self._with_held(holder),
            (now_ms, now_ms + lease_ms, max_items, policy.max_age_ms, max(1, max_bytes)),
        )
        if len(flat) == 1:
            return [], int(float(flat[0]))
        out = []
        for i in range(0, len(flat), 3):
            attempts, partition, index, _created, count, _reason = (
                flat[i + 1].decode().split("|", 5)
            )
            out.append(
                (int(flat[i]), int(partition), int(index), int(count), int(attempts), flat[i + 2])
            )
        return out, None

    async def settle(
        self,
        ids: Sequence[int],
        *,
        ok: bool,
        now_ms: int,
        policy: RetryPolicy,
        reason: str = "MaxRetriesExceeded",
        holder: str | None = None,
    ) -> tuple[int, int]:
        """Ack retries: ``ok`` removes them; else the attempt fails (backoff or DLQ).
        ``holder``'s record of its leases forgets them.

        Returns (records found, records dead-lettered).
        """
        args = [now_ms, 1 if ok else 0, policy.base_ms, policy.cap_ms, policy.max_attempts, reason]
        done, dead = await SETTLE(self._client, self._with_held(holder), [*args, *ids])
        if not ok and int(done) > int(dead):  # due again after a backoff (an exception path)
            await self._wake_fetchers()
        return int(done), int(dead)

    async def release_held(self, holder: str, *, now_ms: int, ids: Sequence[int] = ()) -> int:
        """The retries ``holder`` still holds leased are due now (delivered again, as when
        their lease ends — sooner): all of them (the holder is gone), or those of ``ids``
        (a connection of it closed); how many."""
        due = int(await RELEASE_HELD(self._client, self._with_held(holder), [now_ms, *ids]))
        if due:
            await self._wake_fetchers()
        return due

    async def drop_own(self) -> None:
        """Delete the store's own retries (a broadcast client that left for good); the
        group's sequence and dead letters stay."""
        await self._client.delete(self.keys.due, self.keys.data, self.keys.meta)

    async def next_due(self) -> int | None:
        """Due time (ms) of the earliest retry, if any."""
        first = await self._client.zrange(self.keys.due, 0, 0, withscores=True)
        return int(first[0][1]) if first else None

    async def _list(self, which: str, offset: int, limit: int) -> list[RetryRecord]:
        zkey, dkey, mkey = (
            (self.keys.due, self.keys.data, self.keys.meta)
            if which == "retry"
            else (self.keys.dlq, self.keys.dlq_data, self.keys.dlq_meta)
        )
        entries = await self._client.zrange(zkey, offset, offset + limit - 1, withscores=True)
        if not entries:
            return []
        ids = [e[0] for e in entries]
        metas = await self._client.hmget(mkey, ids)
        datas = await self._client.hmget(dkey, ids)
        return [
            _record(int(rid), meta, data, score)
            for (rid, score), meta, data in zip(entries, metas, datas, strict=True)
            if meta is not None
        ]

    async def list_retries(self, offset: int = 0, limit: int = 100) -> list[RetryRecord]:
        """Retry records by due time."""
        return await self._list("retry", offset, limit)

    async def list_dead_letters(self, offset: int = 0, limit: int = 100) -> list[RetryRecord]:
        """Dead letters by dead-lettered time (``due_ms`` is that time)."""
        return await self._list("dlq", offset, limit)

    async def counts(self) -> tuple[int, int]:
        """(retry records, dead letters)."""
        pipe = self._client.pipeline(transaction=False)
        pipe.zcard(self.keys.due)
        pipe.zcard(self.keys.dlq)
        retries, dead = await pipe.execute()
        return int(retries), int(dead)

    async def resend_dead_letters(self, ids: Sequence[int] = (), *, now_ms: int) -> int:
        """Move dead letters (all when ``ids`` is empty) back into the retry store, due now."""
        moved = int(await DLQ_RESEND(self._client, self._k, [now_ms, *ids]))
        if moved:
            await self._wake_fetchers()
        return moved

    async def retry_now(self, ids: Sequence[int] = (), *, now_ms: int) -> int:
        """Make retries (all when ``ids`` is empty) due now."""
        due = int(await DUE_NOW(self._client, self._k, [now_ms, *ids]))
        if due:
            await self._wake_fetchers()
        return due

    async def remove_created_before(
        self, before_ms: int, business_id: str | None = None, *, scan_count: int = 1_000
    ) -> int:
        """Delete the retries that came into the store before ``before_ms`` (with
        ``business_id``: only those of messages with that business id), as consumed. The
        store is scanned ``scan_count`` records at a time (HSCAN), so a store of any size
        never blocks Redis for long; a retry that comes in during the scan may stay."""
        removed, cursor = 0, 0
        while True:
            cursor, metas = await self._client.hscan(self.keys.meta, cursor, count=scan_count)
            chosen = [rid for rid, meta in metas.items() if _created_ms(meta) < before_ms]
            if chosen and business_id is not None:
                datas = await self._client.hmget(self.keys.data, chosen)
                chosen = [
                    rid
                    for rid, data in zip(chosen, datas, strict=True)
                    if data is not None and decode_record(data).business_id == business_id
                ]
            if chosen:
                removed += await self.remove("retry", [int(rid) for rid in chosen])
            if not cursor:
                return removed

    async def remove(
        self, which: str, ids: Sequence[int] = (), *, before_ms: int | None = None
    ) -> int:
        """Delete retries or dead letters: chosen ids (skip) or all / older than (purge)."""
        return int(
            await REMOVE(
                self._client, self._k, [which, "" if before_ms is None else before_ms, *ids]
            )
        )


def retry_stores(
    client: AnyRedis,
    topic: str,
    app: str,
    member: str | None,
    on_change: Callable[[str, str], None] | None = None,
) -> list[RetryStore]:
    """Where a consumer's retries are, in the order it takes them: a broadcast client's
    own, then the group's (dead letters resent, copies an operator made: for whichever
    client asks first); a clustering consumer's: the group's. Retry ids are the group's,
    so each id is in one of them only."""
    group = RetryStore(client, topic, app, on_change)
    if member is None:
        return [group]
    return [RetryStore(client, topic, app, on_change, member=member), group]
