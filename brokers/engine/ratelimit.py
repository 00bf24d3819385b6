"""Cluster-wide token buckets in Redis for consumer and producer rate limits.

One bucket per (kind, topic, app), shared by every broker and web process. A bucket holds
at most ``rate`` permits and refills at ``rate`` per second. ``acquire`` takes permits
only when enough are there; ``acquire_up_to`` takes as many as there are, up to the
cost (at least one). When they cannot, the bucket is blocked for ``block_ms`` (the
HTTP-MQ rule: a consumer over its limit is blocked for 1 s). ``charge`` takes permits
after the fact and may drive the bucket negative, so the next ``acquire`` waits for the
debt to refill; a negative ``charge`` gives unused permits back (never above ``rate``).
Only the engine's gate (:mod:`brokers.engine.access`) uses the buckets.
"""

from __future__ import annotations

from dataclasses import dataclass

from brokers.engine.redisio import AnyRedis

# KEYS[1] bucket hash; ARGV: rate, cost, now_ms, block_ms,
# mode (1 acquire all, 2 acquire up to cost, 0 charge). Returns {granted, wait_ms}.
_BUCKET = """
local rate = tonumber(ARGV[1])
local cost = tonumber(ARGV[2])
local now = tonumber(ARGV[3])
local block = tonumber(ARGV[4])
local mode = ARGV[5]
local acquire = mode ~= '0'
local b = redis.call('HMGET', KEYS[1], 'tokens', 'ts', 'blocked')
local tokens = tonumber(b[1]) or rate
local ts = tonumber(b[2]) or now
local blocked = tonumber(b[3]) or 0
if now > ts then tokens = math.min(rate, tokens + (now - ts) * rate / 1000) end
local ok = 1
local wait = 0
if acquire then
  if blocked > now then
    ok = 0
    wait = blocked - now
  elseif tokens >= cost or (mode == '1' and cost > rate and tokens >= rate) then
    -- a cost above the rate passes on a full bucket and leaves a debt to refill
    tokens = tokens - cost
    ok = cost
  elseif mode == '2' and tokens >= 1 then
    ok = math.floor(tokens)
    tokens = tokens - ok
  else
    ok = 0
    blocked = now + block
    wait = block
  end
else
  tokens = math.min(rate, tokens - cost)
  ok = cost
end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'ts', now, 'blocked', blocked)
redis.call('PEXPIRE', KEYS[1], math.max(block, 2000) + math.ceil(1000 * math.max(0, -tokens) / rate) + 1000)
return {ok, wait}
"""


@dataclass(frozen=True, slots=True)
class Permit:
    """How many permits were granted, and how long to wait (ms) when none were."""

    count: int
    retry_after_ms: int = 0

    @property
    def granted(self) -> bool:
        """True when any permit was granted."""
        return self.count > 0


def bucket_key(kind: str, topic: str, app: str) -> str:
    """The Redis key of one bucket (one key, so any Redis Cluster slot will do)."""
    return f"mq:rl:{kind}:{{{topic}:{app}}}"


class RateLimiter:
    """Token buckets for consumer fetches and producer sends."""

    def __init__(self, redis: AnyRedis, *, block_ms: int = 1000) -> None:
        self._redis = redis
        self._block_ms = block_ms
        self._script = redis.register_script(_BUCKET)

    async def acquire(
        self, kind: str, topic: str, app: str, *, rate: int, cost: int, now_ms: int
    ) -> Permit:
        """Take ``cost`` permits of a bucket refilled at ``rate``/s, or block it."""
        if rate <= 0:
            raise ValueError("rate must be positive")
        ok, wait = await self._script(
            keys=[bucket_key(kind, topic, app)],
            args=[rate, cost, now_ms, self._block_ms, 1],
        )
        return Permit(int(ok), int(wait))

    async def acquire_up_to(
        self, kind: str, topic: str, app: str, *, rate: int, cost: int, now_ms: int
    ) -> Permit:
        """Take up to ``cost`` permits (as many as the bucket holds, at least one), or
        block the bucket when it holds less than one."""
        if rate <= 0:
            raise ValueError("rate must be positive")
        ok, wait = await self._script(
            keys=[bucket_key(kind, topic, app)],
            args=[rate, cost, now_ms, self._block_ms, 2],
        )
        return Permit(int(ok), int(wait))

    async def charge(
        self, kind: str, topic: str, app: str, *, rate: int, cost: int, now_ms: int
    ) -> None:
        """Take ``cost`` permits whatever the balance (it may go negative); a negative
        ``cost`` returns permits (the balance never exceeds ``rate``)."""
        if cost != 0:
            await self._script(
                keys=[bucket_key(kind, topic, app)], args=[rate, cost, now_ms, self._block_ms, 0]
            )
