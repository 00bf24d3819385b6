"""Delayed and timer messages: held per topic until due, then appended like any other.

A delayed message is validated when it is produced, kept in a sorted set scored by its due
time (with its body in a hash, both under the topic's ``{d:<topic>}`` hash tag), and moved
into a partition by the engine's ``release_delayed`` once due. Moving appends first and removes
second, under a per-topic mover lock, so a crash in between delivers a message twice rather
than losing it (at-least-once, like every other path of the engine).

A message keeps the id it was held under: the appended record carries it as the broker
property :data:`DELAY_ID`, and the store remembers where each released message went
(:meth:`DelayStore.where`) for as long as the topic keeps messages, so an id handed to
the producer before the message had a position (HTTP-MQ's ``msgId``) still names it —
in a consumer's delivery, a resend or a message search.
"""

from __future__ import annotations

import asyncio
import secrets
from dataclasses import dataclass
from typing import NamedTuple

import msgspec

from brokers.engine.errors import DelayedMessagesBusy
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
DELAY_ID = ":delay-id"
"""The broker property of a released message: the delay id it was held under (a
pseudo-property, :func:`~brokers.engine.record.client_property`: no client can set it)."""
KEEP_RELEASED_MS = 7 * 24 * 3600 * 1000
"""How long a released message's position is remembered on a topic without an age limit
(with one, as long as the topic keeps its messages)."""
_TRIM = 64  # positions forgotten per move at most: the map shrinks as fast as it grows

_ADD = Script("""
local id = redis.call('INCR', KEYS[3])
redis.call('HSET', KEYS[2], id, ARGV[2])
redis.call('ZADD', KEYS[1], ARGV[1], id)
return id
""")


_MOVED = Script("""
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('HSET', KEYS[3], ARGV[1], ARGV[2])
redis.call('ZADD', KEYS[4], ARGV[3], ARGV[1])
local old = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', ARGV[4], 'LIMIT', 0, ARGV[6])
if #old > 0 then
  redis.call('HDEL', KEYS[3], unpack(old))
  redis.call('ZREM', KEYS[4], unpack(old))
end
redis.call('PEXPIRE', KEYS[3], ARGV[5])
redis.call('PEXPIRE', KEYS[4], ARGV[5])
return 1
""")


_CANCEL = Script("""
-- KEYS: due, held. ARGV: delay ids. Stop holding each id still held; the ids cancelled.
local out = {}
for _, id in ipairs(ARGV) do
  if redis.call('ZREM', KEYS[1], id) == 1 then
    redis.call('HDEL', KEYS[2], id)
    out[#out + 1] = id
  end
end
return out
""")

MOVER_TTL_MS = 30_000
"""How long a mover holds a topic's delayed messages at most (a crashed one: this long)."""
CANCEL_WAIT_S = 5.0
"""How long a cancel waits for a running mover to let go before giving up."""


class Whereabouts(NamedTuple):
    """Where a delayed message is: still held (``due_ms``), appended (``partition``,
    ``index``), or unknown (all None: never held, or released longer ago than kept)."""

    due_ms: int | None = None
    partition: int | None = None
    index: int | None = None


class Delayed(NamedTuple):
    """A held message: its delay id, and the partition it is to be appended to (None:
    chosen when due, as no partition was writable when it was held)."""

    delay_id: int
    partition: int | None


class Held(msgspec.Struct, frozen=True):
    """What a delayed message needs to be appended later.

    ``partition`` is where it goes when due. ``pinned``: the producer named it (or its
    order key did), so the message waits for that partition; otherwise it is the
    partition whose turn it was when held (the one its producer was told), and the
    message goes elsewhere when that one is not writable when due. Held messages stored
    before ``pinned`` existed read as pinned, which they were."""

    app: str
    partition: int | None
    client_address: str | None
    body: bytes
    business_id: str = ""
    attributes: dict[str, str] | None = None
    priority: int = 0
    send_time_ms: int = 0
    pinned: bool = True


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

    @property
    def released(self) -> str:
        """Hash: delay id → ``partition:index`` it was appended at."""
        return f"mq:{self.tag}:released"

    @property
    def released_at(self) -> str:
        """Sorted set: delay id scored by its release time (what to forget first)."""
        return f"mq:{self.tag}:released-at"


class HeldMessage(NamedTuple):
    """A delayed message still held: its delay id, when it is due, and what it holds."""

    delay_id: int
    due_ms: int
    held: Held


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

    async def moved(
        self, delay_id: int, partition: int, index: int, *, now_ms: int, keep_ms: int
    ) -> None:
        """``delay_id`` was appended at ``partition:index``: stop holding it, remember
        where it went for ``keep_ms``, and forget positions older than that."""
        k = self.keys
        await _MOVED(
            self._redis,
            (k.due, k.held, k.released, k.released_at),
            (
                fmt_int(delay_id),
                f"{partition}:{index}",
                fmt_int(now_ms),
                fmt_int(now_ms - keep_ms),
                fmt_int(keep_ms),
                fmt_int(_TRIM),
            ),
        )

    async def where(self, delay_id: int) -> Whereabouts:
        """Where the message held as ``delay_id`` is now (one round trip)."""
        pipe = self._redis.pipeline(transaction=False)
        pipe.zscore(self.keys.due, delay_id)
        pipe.hget(self.keys.released, delay_id)
        due, released = await pipe.execute()
        if released is not None:
            partition, _, index = released.partition(b":")
            return Whereabouts(partition=int(partition), index=int(index))
        return Whereabouts(due_ms=int(due)) if due is not None else Whereabouts()

    async def pending(self) -> int:
        return int(await self._redis.zcard(self.keys.due))

    async def page(
        self,
        *,
        offset: int,
        limit: int,
        due_from_ms: int | None = None,
        due_to_ms: int | None = None,
    ) -> tuple[int, list[HeldMessage]]:
        """(how many are held with a due time in [``due_from_ms``, ``due_to_ms``], the
        ``limit`` of them from ``offset`` on, soonest due first). Two round trips, whatever
        the number held; one released meanwhile is left out of the page."""
        low = "-inf" if due_from_ms is None else fmt_int(due_from_ms)
        high = "+inf" if due_to_ms is None else fmt_int(due_to_ms)
        pipe = self._redis.pipeline(transaction=False)
        pipe.zcount(self.keys.due, low, high)
        pipe.zrangebyscore(self.keys.due, low, high, start=offset, num=limit, withscores=True)
        total, ranked = await pipe.execute()
        if not ranked:
            return int(total), []
        raw = await self._redis.hmget(self.keys.held, [i for i, _ in ranked])
        rows = [
            HeldMessage(int(i), int(due), msgspec.msgpack.decode(r, type=Held))
            for (i, due), r in zip(ranked, raw, strict=True)
            if r is not None
        ]
        return int(total), rows

    async def one(self, delay_id: int) -> HeldMessage | None:
        """The message held as ``delay_id``; None when it is not held (one round trip)."""
        pipe = self._redis.pipeline(transaction=False)
        pipe.zscore(self.keys.due, delay_id)
        pipe.hget(self.keys.held, delay_id)
        due, raw = await pipe.execute()
        if due is None or raw is None:
            return None
        return HeldMessage(delay_id, int(due), msgspec.msgpack.decode(raw, type=Held))

    async def cancel(self, delay_ids: list[int], *, wait_s: float = CANCEL_WAIT_S) -> list[int]:
        """Stop holding ``delay_ids``; the ids that were still held (the others were
        released, cancelled before, or never held).

        Taken as the topic's mover, so no mover is between appending a message and
        forgetting it: a cancelled message is never delivered. Waits up to ``wait_s`` for a
        running mover, then raises :class:`DelayedMessagesBusy` with nothing changed."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_s
        while (token := await self.lock(MOVER_TTL_MS)) is None:
            if loop.time() >= deadline:
                raise DelayedMessagesBusy(
                    "the topic's delayed messages are being released; try again shortly"
                )
            await asyncio.sleep(0.05)
        try:
            k = self.keys
            done = await _CANCEL(self._redis, (k.due, k.held), [fmt_int(i) for i in delay_ids])
            await self.forget_if_empty()
        finally:
            await self.unlock(token)
        return sorted(int(i) for i in done)

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
