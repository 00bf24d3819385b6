"""Per-subscriber copies of a fan-out queue, kept in Redis (VibeMQ FanOutWithAck).

A message taken from a fan-out queue is copied, in one script, to every subscriber
*identity* present at that moment; each identity then claims, acks and retries its own
copies, so a subscriber that reconnects (to any broker process) finds its unacked
copies, and a broker crash loses nothing. Presence is a sorted set of
``<identity>|<connection>`` members scored by the time they lapse (live processes
refresh theirs; a crashed process's lapse), so several connections of one identity count
once.

Per identity (all keys share the queue's hash tag ``{f:<queue>}``, so every script is
single-slot): ``e`` record by message index, ``a`` deliveries made so far, ``r`` ready
(scored by index: oldest first), ``d`` waiting for a retry (scored by due time) and ``f``
in flight (scored by ack deadline). A lapsed deadline is a failed attempt: the copy waits
``base·2^(n−1)`` (capped) and is claimed again, or, past ``max_retry``, is handed back as
dead for the caller to dead-letter and then ack. Keys of an identity nobody claims for
``retention_ms`` expire.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from brokers.engine.keys import PREFIX, notify_channel
from brokers.engine.model import Delivery
from brokers.engine.redisio import AnyRedis, Script

DEFAULT_RETENTION_MS = 24 * 3600 * 1000

_IDENTITY_KEYS = """
local function keys_of(prefix, id)
  return prefix .. ':e:' .. id, prefix .. ':a:' .. id, prefix .. ':r:' .. id,
         prefix .. ':d:' .. id, prefix .. ':f:' .. id
end
local function touch(ret, ...)
  for _, k in ipairs({...}) do redis.call('PEXPIRE', k, ret) end
end
"""

ASSIGN = Script(
    _IDENTITY_KEYS
    + """
-- KEYS: members, known. ARGV: prefix, now, max_pending, retention, channel, then
-- index, record pairs. Returns {identities copied to, copies dropped for overflow}.
local prefix, now, maxp, ret = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', s(now))
local seen, ids = {}, {}
for _, m in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  local id = string.match(m, '^(.*)|[^|]*$')
  if id and not seen[id] then seen[id] = true; ids[#ids + 1] = id end
end
local dropped = 0
for _, id in ipairs(ids) do
  local e, a, r, d, f = keys_of(prefix, id)
  redis.call('SADD', KEYS[2], id)
  for i = 6, #ARGV, 2 do
    if redis.call('HSETNX', e, ARGV[i], ARGV[i + 1]) == 1 then
      redis.call('HSET', a, ARGV[i], 0)
      redis.call('ZADD', r, ARGV[i], ARGV[i])
    end
  end
  local over = redis.call('HLEN', e) - maxp
  if over > 0 then
    for _, idx in ipairs(redis.call('ZRANGE', r, 0, over - 1)) do
      redis.call('ZREM', r, idx); redis.call('HDEL', e, idx); redis.call('HDEL', a, idx)
      dropped = dropped + 1
    end
  end
  touch(ret, e, a, r, d, f)
end
touch(ret, KEYS[2])
if #ids > 0 then redis.call('PUBLISH', ARGV[5], '0') end
return {#ids, dropped}
"""
)

CLAIM = Script(
    """
-- KEYS: e, a, r, d, f of one identity. ARGV: now, count, lease, max_retry, base, cap,
-- retention. Returns {claimed, dead}, each a flat list of index, attempts, record.
local now, count, lease = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local maxr, base, cap = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local E, A, R, D, F = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local dead, out = {}, {}
for _, idx in ipairs(redis.call('ZRANGEBYSCORE', F, '-inf', s(now))) do
  local n = tonumber(redis.call('HGET', A, idx) or '1')
  if n > maxr then
    redis.call('ZADD', F, s(now + lease), idx)  -- held until the caller dead-letters it
    dead[#dead + 1] = idx; dead[#dead + 1] = s(n); dead[#dead + 1] = redis.call('HGET', E, idx) or ''
  else
    local b = base * 2 ^ (math.max(n, 1) - 1)
    if b > cap then b = cap end
    redis.call('ZREM', F, idx); redis.call('ZADD', D, s(now + b), idx)
  end
end
for _, idx in ipairs(redis.call('ZRANGEBYSCORE', D, '-inf', s(now))) do
  redis.call('ZREM', D, idx); redis.call('ZADD', R, idx, idx)
end
if count > 0 then
  for _, idx in ipairs(redis.call('ZRANGE', R, 0, count - 1)) do
    redis.call('ZREM', R, idx)
    local n = redis.call('HINCRBY', A, idx, 1)
    redis.call('ZADD', F, s(now + lease), idx)
    out[#out + 1] = idx; out[#out + 1] = s(n); out[#out + 1] = redis.call('HGET', E, idx) or ''
  end
end
for _, k in ipairs(KEYS) do redis.call('PEXPIRE', k, ARGV[7]) end
return {out, dead}
"""
)

SETTLE = Script(
    """
-- KEYS: e, a, r, d, f. ARGV: mode ('ack' or 'release'), indexes. 'ack' forgets copies;
-- 'release' puts in-flight copies back at the head without counting an attempt.
local n = 0
for i = 2, #ARGV do
  local idx = ARGV[i]
  if ARGV[1] == 'ack' then
    n = n + redis.call('HDEL', KEYS[1], idx)
    redis.call('HDEL', KEYS[2], idx); redis.call('ZREM', KEYS[3], idx)
    redis.call('ZREM', KEYS[4], idx); redis.call('ZREM', KEYS[5], idx)
  elseif redis.call('ZREM', KEYS[5], idx) == 1 then
    redis.call('HINCRBY', KEYS[2], idx, -1); redis.call('ZADD', KEYS[3], idx, idx)
    n = n + 1
  end
end
return n
"""
)

PURGE = Script(
    _IDENTITY_KEYS
    + """
-- KEYS: members, known. ARGV: prefix, identity or '' for every identity of the queue.
local ids = {ARGV[2]}
if ARGV[2] == '' then ids = redis.call('SMEMBERS', KEYS[2]) end
local n = 0
for _, id in ipairs(ids) do
  local e, a, r, d, f = keys_of(ARGV[1], id)
  n = n + redis.call('HLEN', e)
  redis.call('DEL', e, a, r, d, f)
  redis.call('SREM', KEYS[2], id)
end
if ARGV[2] == '' then redis.call('DEL', KEYS[1], KEYS[2]) end
return n
"""
)


@dataclass(frozen=True, slots=True)
class Claim:
    """What :meth:`FanoutCopies.claim` handed out: copies to deliver now (``attempts`` is
    this delivery's number) and copies out of retries, to dead-letter and then ack."""

    deliveries: list[Delivery] = field(default_factory=list)
    dead: list[Delivery] = field(default_factory=list)


def _deliveries(flat: Sequence[bytes]) -> list[Delivery]:
    out = []
    for i in range(0, len(flat), 3):
        idx, attempts, record = int(flat[i]), int(flat[i + 1]), flat[i + 2]
        out.append(Delivery(0, idx, 1, bytes(record), attempts=attempts))
    return out


class FanoutCopies:
    """The per-subscriber copies of one fan-out queue."""

    def __init__(
        self,
        redis: AnyRedis,
        queue: str,
        now_ms: Callable[[], int],
        *,
        retry_base_ms: int = 2_000,
        retry_cap_ms: int = 120_000,
        retention_ms: int = DEFAULT_RETENTION_MS,
    ) -> None:
        self._redis, self.queue, self._now = redis, queue, now_ms
        self._base, self._cap, self.retention_ms = retry_base_ms, retry_cap_ms, retention_ms
        self._prefix = f"{PREFIX}:{{f:{queue}}}"
        self._members, self._known = f"{self._prefix}:m", f"{self._prefix}:k"

    def _keys(self, identity: str) -> list[str]:
        return [f"{self._prefix}:{part}:{identity}" for part in "eardf"]

    async def join(self, entries: Sequence[tuple[str, str]], ttl_ms: int) -> None:
        """Mark ``(identity, connection)`` subscribers present for ``ttl_ms`` (call again
        to stay present)."""
        if not entries:
            return
        lapse = self._now() + ttl_ms
        await self._redis.zadd(self._members, {f"{i}|{c}": lapse for i, c in entries})

    async def leave(self, identity: str, connection: str) -> None:
        """The connection no longer subscribes; the identity's copies stay."""
        await self._redis.zrem(self._members, f"{identity}|{connection}")

    async def assign(self, deliveries: Sequence[Delivery], *, max_pending: int) -> tuple[int, int]:
        """Copy taken messages to every identity present; returns (identities, copies
        dropped because an identity already held ``max_pending``). Wakes the queue's
        dispatchers when anything was copied."""
        args: list[object] = [
            self._prefix,
            self._now(),
            max_pending,
            self.retention_ms,
            notify_channel(self.queue),
        ]
        for d in deliveries:
            args += (d.index, d.record)
        ids, dropped = await ASSIGN(self._redis, [self._members, self._known], args)
        return int(ids), int(dropped)

    async def claim(self, identity: str, *, count: int, lease_ms: int, max_retry: int) -> Claim:
        """Take up to ``count`` ready copies of ``identity`` in flight for ``lease_ms``;
        lapsed leases count as failed attempts (retry with backoff, or dead)."""
        claimed, dead = await CLAIM(
            self._redis,
            self._keys(identity),
            [
                self._now(),
                count,
                lease_ms,
                max_retry,
                self._base,
                self._cap,
                self.retention_ms,
            ],
        )
        return Claim(_deliveries(claimed), _deliveries(dead))

    async def ack(self, identity: str, indexes: Sequence[int]) -> int:
        """Forget copies for good (acked or dead-lettered); unknown ones are ignored."""
        if not indexes:
            return 0
        return int(await SETTLE(self._redis, self._keys(identity), ["ack", *indexes]))

    async def release(self, identity: str, indexes: Sequence[int]) -> int:
        """In-flight copies back to the identity's head at once (its connection closed:
        not a failed attempt)."""
        if not indexes:
            return 0
        return int(await SETTLE(self._redis, self._keys(identity), ["release", *indexes]))

    async def pending(self, identity: str) -> tuple[int, int]:
        """(waiting, in flight) copies of ``identity``."""
        _, _, r, d, f = self._keys(identity)
        pipe = self._redis.pipeline(transaction=False)
        pipe.zcard(r)
        pipe.zcard(d)
        pipe.zcard(f)
        ready, delayed, inflight = await pipe.execute()
        return int(ready) + int(delayed), int(inflight)

    async def purge(self, identity: str | None = None) -> int:
        """Delete ``identity``'s copies, or every identity's and the presence (the queue
        was deleted); returns how many copies went."""
        return int(
            await PURGE(self._redis, [self._members, self._known], [self._prefix, identity or ""])
        )
