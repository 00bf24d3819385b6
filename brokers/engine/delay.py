"""Delayed and timer messages: held per topic until due, then appended like any other.

A delayed message is validated when it is produced, kept in a sorted set scored by its due
time (with its body in a hash, both under the topic's ``{d:<topic>}`` hash tag), and moved
into a partition by :meth:`DelayStore.release` once due. Moving appends first and removes
second, under a per-topic mover lock, so a crash in between delivers a message twice rather
than losing it (at-least-once, like every other path of the engine).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

import msgspec

from brokers.engine.redisio import AnyRedis, Script, fmt_int

# HTTP-MQ / RocketMQ delay levels 1–18 in seconds.
DELAY_LEVELS = (
    1,
    5,
    10,
    30,
    60,
    120,
    180,
    240,
    300,
    360,
    420,
    480,
    540,
    600,
    1200,
    1800,
    3600,
    7200,
)
MAX_DELAY_MS = 30 * 24 * 3600 * 1000
# Topics that may hold delayed messages, so movers need not scan every topic.
DELAYED_TOPICS = "mq:delayed-topics"

_ADD = Script("""
local id = redis.call('INCR', KEYS[3])
redis.call('HSET', KEYS[2], id, ARGV[2])
redis.call('ZADD', KEYS[1], ARGV[1], id)
return id
""")

_REMOVE = Script("""
for i = 1, #ARGV do
  redis.call('ZREM', KEYS[1], ARGV[i])
  redis.call('HDEL', KEYS[2], ARGV[i])
end
return #ARGV
""")


class Held(msgspec.Struct, frozen=True):
    """What a delayed message needs to be appended later."""

    app: str
    partition: int | None
    client_address: str | None
    body: bytes
    business_id: str = ""
    attributes: dict[str, str] | None = None
    priority: int = 0
    send_time_ms: int = 0


@dataclass(frozen=True, slots=True)
class DelayKeys:
    """Keys of one topic's delay store (one hash slot)."""

    topic: str

    @property
    def tag(self) -> str:
        return f"{{d:{self.topic}}}"

    @property
    def due(self) -> str:
        return f"mq:{self.tag}:due"

    @property
    def held(self) -> str:
        return f"mq:{self.tag}:held"

    @property
    def seq(self) -> str:
        return f"mq:{self.tag}:seq"

    @property
    def mover(self) -> str:
        return f"mq:{self.tag}:mover"


class DelayStore:
    """The delayed messages of one topic."""

    def __init__(self, redis: AnyRedis, topic: str) -> None:
        self._redis = redis
        self.keys = DelayKeys(topic)

    async def add(self, held: Held, due_ms: int) -> int:
        """Hold a message until ``due_ms``; returns its delay id."""
        k = self.keys
        payload = msgspec.msgpack.encode(held)
        delay_id = int(await _ADD(self._redis, (k.due, k.held, k.seq), (fmt_int(due_ms), payload)))
        await self._redis.sadd(DELAYED_TOPICS, k.topic)
        return delay_id

    async def due(self, now_ms: int, limit: int) -> list[tuple[int, Held]]:
        """Up to ``limit`` messages due by ``now_ms``, oldest first."""
        ids = await self._redis.zrangebyscore(self.keys.due, "-inf", now_ms, start=0, num=limit)
        if not ids:
            return []
        raw = await self._redis.hmget(self.keys.held, ids)
        return [
            (int(i), msgspec.msgpack.decode(r, type=Held))
            for i, r in zip(ids, raw, strict=True)
            if r is not None
        ]

    async def remove(self, ids: list[int]) -> None:
        if ids:
            await _REMOVE(self._redis, (self.keys.due, self.keys.held), [fmt_int(i) for i in ids])

    async def pending(self) -> int:
        return int(await self._redis.zcard(self.keys.due))

    async def forget_if_empty(self) -> None:
        """Drop the topic from DELAYED_TOPICS when nothing waits (remove, then re-check,
        so a message added meanwhile puts it back)."""
        await self._redis.srem(DELAYED_TOPICS, self.keys.topic)
        if await self.pending():
            await self._redis.sadd(DELAYED_TOPICS, self.keys.topic)

    async def lock(self, ttl_ms: int) -> str | None:
        """Become this topic's mover for ``ttl_ms``; a token, or None if another is."""
        token = secrets.token_hex(8)
        ok = await self._redis.set(self.keys.mover, token, nx=True, px=ttl_ms)
        return token if ok else None

    async def unlock(self, token: str) -> None:
        if (await self._redis.get(self.keys.mover) or b"").decode() == token:
            await self._redis.delete(self.keys.mover)


async def topics_with_delays(redis: AnyRedis) -> list[str]:
    """Topics that may hold delayed messages."""
    return sorted(t.decode() for t in await redis.smembers(DELAYED_TOPICS))
