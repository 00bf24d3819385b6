"""VibeMQ queue features on a partition: priority, TTL, max size/overflow, retry, DLQ.

A queue message is appended to the partition's stream like any other (so every
protocol can read it) and its index is also put in the partition's *ready* set, scored
by index (FIFO) or by ``(3 − priority)·2^40 + index`` (PriorityBased: highest first,
FIFO within a priority). Taking moves indexes to the *in-flight* set with an ack
deadline; an ack removes them; a failure or an expired deadline schedules a retry in
the *delayed* set with backoff ``base·2^(n−1)`` (capped) until ``max_retry_attempts``,
then the message becomes dead. Expired (TTL) and dead messages move to the *dead* set in
the same script (a take of 0 messages is a sweep: expired leases, due retries and
TTL-expired heads of the ready set) and are then copied to the queue's DLQ topic (``<queue>.dlq``) by
:class:`Queues`, which removes them only after the copy — or counted as dropped when
the queue has no DLQ. Nothing leaves silently.

Publishing checks the size first (ready + delayed ≥ max): DropOldest discards the
oldest queued message (counted), DropNewest discards the new one, BlockPublisher
raises :class:`QueueFull`, RedirectToDlq stores it in the DLQ instead. All of one
partition's sets share its hash tag, so every script is single-slot.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from brokers.engine.catalog import QueueSettings
from brokers.engine.errors import QueueFull
from brokers.engine.keys import PartitionKeys, notify_channel
from brokers.engine.model import Delivery, QoS
from brokers.engine.redisio import AnyRedis, Durability, Script

BAND = 2**40

_QUEUE_FN = """
local K = {stream = KEYS[1], meta = KEYS[2], ready = KEYS[3], inflight = KEYS[4],
           delayed = KEYS[5], attempts = KEYS[6], dead = KEYS[7], scores = KEYS[8]}
local function record_of(idx)
  local e = redis.call('XREVRANGE', K.stream, idx .. '-18446744073709551615', '-', 'COUNT', 1)[1]
  if not e then return nil end
  local fi = first_of(e[1])
  if s(fi) ~= idx then return nil end
  return e[2][2]
end
local function store_time(rec)
  return struct.unpack('>i8', rec, 40) + struct.unpack('>i4', rec, 48)
end
local function forget(idx)
  redis.call('ZREM', K.ready, idx); redis.call('ZREM', K.inflight, idx)
  redis.call('ZREM', K.delayed, idx); redis.call('HDEL', K.attempts, idx)
  redis.call('HDEL', K.scores, idx)
end
local function kill(idx, reason)
  local a = redis.call('HGET', K.attempts, idx) or '0'
  forget(idx)
  redis.call('ZADD', K.dead, idx, idx .. '|' .. a .. '|' .. reason)
end
"""

PUBLISH_MANY = Script(
    _QUEUE_FN
    + """
-- ARGV: channel, partition, prioritised(0/1), max_size, policy, then count, record, priority
-- per message. Each message meets the overflow policy in turn (DropNewest, BlockPublisher
-- and RedirectToDlq give a verdict; DropOldest drops the oldest stored message, across
-- priority bands and delayed ones, and stores it); returns {index or verdict, dropped
-- oldest or ''} per message, and one notification when anything was stored.
local prio, max_size, policy = ARGV[3], tonumber(ARGV[4]), ARGV[5]
local size = redis.call('ZCARD', K.ready) + redis.call('ZCARD', K.delayed)
local nxt = tonumber(redis.call('HGET', K.meta, 'next') or '0')
local out, stored = {}, 0
for i = 6, #ARGV, 3 do
  local verdict, dropped = nil, ''
  if size >= max_size then
    if policy == 'DropNewest' then redis.call('HINCRBY', K.meta, 'dropped', 1); verdict = 'dropped'
    elseif policy == 'BlockPublisher' then verdict = 'full'
    elseif policy == 'RedirectToDlq' then verdict = 'redirect'
    else
      local oldest = nil
      for band = 0, 3 do
        local h = redis.call('ZRANGEBYSCORE', K.ready, s(band * 1099511627776), '(' .. s((band + 1) * 1099511627776), 'LIMIT', 0, 1)[1]
        if h and (not oldest or tonumber(h) < tonumber(oldest)) then oldest = h end
      end
      local d = redis.call('ZRANGE', K.delayed, 0, -1)
      for _, h in ipairs(d) do if not oldest or tonumber(h) < tonumber(oldest) then oldest = h end end
      if oldest then forget(oldest); redis.call('HINCRBY', K.meta, 'dropped', 1); dropped = oldest; size = size - 1 end
    end
  end
  if verdict then
    out[#out + 1] = verdict; out[#out + 1] = ''
  else
    local rec = string.sub(ARGV[i + 1], 1, 6) .. struct.pack('>i8', nxt) .. string.sub(ARGV[i + 1], 15)
    redis.call('XADD', K.stream, s(nxt) .. '-' .. ARGV[i], 'm', rec)
    local score = nxt
    if prio == '1' then score = (3 - tonumber(ARGV[i + 2])) * 1099511627776 + nxt end
    redis.call('ZADD', K.ready, s(score), s(nxt))
    redis.call('HSET', K.scores, s(nxt), s(score))
    out[#out + 1] = s(nxt); out[#out + 1] = dropped
    nxt = nxt + tonumber(ARGV[i]); size = size + 1; stored = stored + 1
  end
end
if stored > 0 then
  redis.call('HSET', K.meta, 'next', s(nxt))
  redis.call('HSETNX', K.meta, 'min', '0')
  redis.call('PUBLISH', ARGV[1], ARGV[2])
end
return out
"""
)

TAKE = Script(
    _QUEUE_FN
    + """
-- ARGV: now, want, lease_ms, ttl_ms (0 none), max_retries, base_ms, cap_ms
local now, want, lease = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local ttl, maxr, base, cap = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
-- expired leases count as failed attempts
for _, idx in ipairs(redis.call('ZRANGEBYSCORE', K.inflight, '-inf', s(now))) do
  redis.call('ZREM', K.inflight, idx)
  local a = tonumber(redis.call('HGET', K.attempts, idx) or '1')
  if a > maxr then kill(idx, 'MaxRetriesExceeded') else
    local delay = base * (2 ^ (a - 1))
    if cap > 0 and delay > cap then delay = cap end
    redis.call('ZADD', K.delayed, s(now + delay), idx)
  end
end
for _, idx in ipairs(redis.call('ZRANGEBYSCORE', K.delayed, '-inf', s(now))) do
  redis.call('ZREM', K.delayed, idx)
  redis.call('ZADD', K.ready, redis.call('HGET', K.scores, idx) or idx, idx)
end
-- TTL sweep: expired messages at the head of each band die even when nobody takes
if ttl > 0 then
  for band = 0, 3 do
    local lo, hi = s(band * 1099511627776), '(' .. s((band + 1) * 1099511627776)
    for _, idx in ipairs(redis.call('ZRANGEBYSCORE', K.ready, lo, hi, 'LIMIT', 0, 100)) do
      local rec = record_of(idx)
      if not rec then forget(idx)
      elseif store_time(rec) + ttl <= now then kill(idx, 'MessageExpired')
      else break end
    end
  end
end
local out = {}
local got = 0
while got < want do
  local head = redis.call('ZPOPMIN', K.ready)
  if not head[1] then break end
  local idx = head[1]
  local rec = record_of(idx)
  if not rec then forget(idx)
  elseif ttl > 0 and store_time(rec) + ttl <= now then kill(idx, 'MessageExpired')
  else
    local a = redis.call('HINCRBY', K.attempts, idx, 1)
    redis.call('ZADD', K.inflight, s(now + lease), idx)
    out[#out + 1] = idx; out[#out + 1] = s(a); out[#out + 1] = rec
    got = got + 1
  end
end
return out
"""
)

SETTLE = Script(
    _QUEUE_FN
    + """
-- ARGV: mode ('ack' | 'fail' | 'release'), now, max_retries, base_ms, cap_ms, indexes...
local mode, now = ARGV[1], tonumber(ARGV[2])
local maxr, base, cap = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local n = 0
for j = 6, #ARGV do
  local idx = ARGV[j]
  if redis.call('ZREM', K.inflight, idx) == 1 then
    n = n + 1
    if mode == 'ack' then forget(idx)
    elseif mode == 'release' then
      redis.call('HINCRBY', K.attempts, idx, -1)
      redis.call('ZADD', K.ready, redis.call('HGET', K.scores, idx) or idx, idx)
    else
      local a = tonumber(redis.call('HGET', K.attempts, idx) or '1')
      if a > maxr then kill(idx, 'MaxRetriesExceeded') else
        local delay = base * (2 ^ (a - 1))
        if cap > 0 and delay > cap then delay = cap end
        redis.call('ZADD', K.delayed, s(now + delay), idx)
      end
    end
  end
end
return n
"""
)

DEAD = Script(
    _QUEUE_FN
    + """
-- ARGV: max. Dead entries waiting for their DLQ copy: (index|attempts|reason, record).
local out = {}
for _, m in ipairs(redis.call('ZRANGE', K.dead, 0, tonumber(ARGV[1]) - 1)) do
  local idx = string.match(m, '^(%d+)|')
  out[#out + 1] = m; out[#out + 1] = record_of(idx) or ''
end
return out
"""
)

DROP_DEAD = Script(
    _QUEUE_FN
    + """
-- ARGV: count_as_dropped (0/1), members...
for j = 2, #ARGV do
  if redis.call('ZREM', K.dead, ARGV[j]) == 1 and ARGV[1] == '1' then
    redis.call('HINCRBY', K.meta, 'dropped', 1)
  end
end
return 1
"""
)

PURGE = Script(
    _QUEUE_FN
    + """
-- Delete the queue's messages and tracking; min moves to next.
local nxt = redis.call('HGET', K.meta, 'next') or '0'
redis.call('DEL', K.ready, K.inflight, K.delayed, K.attempts, K.dead, K.scores)
redis.call('XTRIM', K.stream, 'MAXLEN', 0)
redis.call('HSET', K.meta, 'min', nxt)
return 1
"""
)


@dataclass(frozen=True, slots=True)
class QueueStats:
    """Counts of a queue partition (VibeMQ queueInfo)."""

    ready: int
    in_flight: int
    delayed: int
    dead_pending: int
    dropped: int

    @property
    def message_count(self) -> int:
        """Queued, not in flight."""
        return self.ready + self.delayed


@dataclass(frozen=True, slots=True)
class PublishOutcome:
    index: int  # -1 when not stored in the queue
    dropped: bool = False
    dead_lettered: bool = False
    dropped_oldest: int | None = None


def _keys(topic: str, partition: int) -> tuple[str, ...]:
    k = PartitionKeys(topic, partition)
    return (
        k.stream,
        k.meta,
        k.q_ready,
        k.q_inflight,
        k.q_delayed,
        k.q_attempts,
        f"{k.tag}:qx",
        f"{k.tag}:qs",
    )


@dataclass(frozen=True, slots=True)
class QueueRetry:
    """VibeMQ retry defaults: 2 s · 2^(n−1), capped at 2 min."""

    base_ms: int = 2_000
    cap_ms: int = 120_000


class Queues:
    """Queue operations on one partition of a topic."""

    def __init__(
        self,
        client: AnyRedis,
        durability: Durability,
        topic: str,
        partition: int = 0,
        retry: QueueRetry = QueueRetry(),
    ) -> None:
        self._client = client
        self._durability = durability
        self.topic, self.partition = topic, partition
        self._k = _keys(topic, partition)
        self._retry = retry

    async def publish(
        self, record: bytes, count: int, *, priority: int, settings: QueueSettings, qos: QoS
    ) -> PublishOutcome:
        """Store a message under the queue's overflow policy (:meth:`publish_many` of one);
        QueueFull when the policy is BlockPublisher and the queue is full."""
        (outcome,) = await self.publish_many(
            [(record, count, priority)], settings=settings, qos=qos
        )
        if isinstance(outcome, QueueFull):
            raise outcome
        return outcome

    async def publish_many(
        self,
        items: Sequence[tuple[bytes, int, int]],
        *,
        settings: QueueSettings,
        qos: QoS,
    ) -> list[PublishOutcome | QueueFull]:
        """Store ``(record, count, priority)`` items in order with one script run: each gets
        its :class:`PublishOutcome`, or QueueFull (returned, not raised) when the policy is
        BlockPublisher and the queue is full."""
        if not items:
            return []
        prioritised = settings.delivery_mode == "PriorityBased"
        args: list[object] = [
            notify_channel(self.topic),
            self.partition,
            1 if prioritised else 0,
            settings.max_queue_size,
            settings.overflow_policy,
        ]
        for record, count, priority in items:
            args += (count, record, max(0, min(3, priority)))
        flat = await self._durability.run(PUBLISH_MANY, self._k, args, qos)
        out: list[PublishOutcome | QueueFull] = []
        for i in range(0, len(flat), 2):
            idx, dropped = flat[i].decode(), flat[i + 1]
            if idx == "dropped":
                out.append(PublishOutcome(-1, dropped=True))
            elif idx == "full":
                out.append(QueueFull(f"queue {self.topic} is full ({settings.max_queue_size})"))
            elif idx == "redirect":
                out.append(PublishOutcome(-1, dead_lettered=True))
            else:
                out.append(
                    PublishOutcome(int(idx), dropped_oldest=int(dropped) if dropped else None)
                )
        return out

    async def take(
        self, *, now_ms: int, count: int, lease_ms: int, settings: QueueSettings
    ) -> list[Delivery]:
        """Lease up to ``count`` ready messages; ``attempts`` is the delivery number."""
        flat = await TAKE(
            self._client,
            self._k,
            (
                now_ms,
                count,
                lease_ms,
                settings.message_ttl_ms or 0,
                settings.max_retry_attempts,
                self._retry.base_ms,
                self._retry.cap_ms,
            ),
        )
        return [
            Delivery(self.partition, int(flat[i]), 1, flat[i + 2], attempts=int(flat[i + 1]))
            for i in range(0, len(flat), 3)
        ]

    async def settle(
        self, mode: str, indexes: list[int], *, now_ms: int, settings: QueueSettings
    ) -> int:
        """'ack' removes, 'fail' schedules a retry (or kills), 'release' requeues at once."""
        if not indexes:
            return 0
        n = int(
            await SETTLE(
                self._client,
                self._k,
                (
                    mode,
                    now_ms,
                    settings.max_retry_attempts,
                    self._retry.base_ms,
                    self._retry.cap_ms,
                    *indexes,
                ),
            )
        )
        if mode == "release" and n:
            await self._client.publish(notify_channel(self.topic), self.partition)
        return n

    async def dead(self, limit: int = 100) -> list[tuple[bytes, int, int, str, bytes]]:
        """Dead entries waiting for the DLQ: (member, index, attempts, reason, record)."""
        flat = await DEAD(self._client, self._k, (limit,))
        out = []
        for i in range(0, len(flat), 2):
            member = flat[i]
            idx, attempts, reason = member.decode().split("|", 2)
            out.append((member, int(idx), int(attempts), reason, flat[i + 1]))
        return out

    async def drop_dead(self, members: list[bytes], *, counted: bool) -> None:
        """Forget dead entries (after their DLQ copy, or counted as dropped)."""
        if members:
            await DROP_DEAD(self._client, self._k, (1 if counted else 0, *members))

    async def stats(self) -> QueueStats:
        pipe = self._client.pipeline(transaction=False)
        for key in (self._k[2], self._k[3], self._k[4], self._k[6]):
            pipe.zcard(key)
        pipe.hget(self._k[1], "dropped")
        ready, inflight, delayed, dead, dropped = await pipe.execute()
        return QueueStats(int(ready), int(inflight), int(delayed), int(dead), int(dropped or 0))

    async def purge(self) -> None:
        await PURGE(self._client, self._k, ())
