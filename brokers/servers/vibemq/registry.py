"""Subscribers of every process in Redis, so queueInfo counts the whole cluster's.

One sorted set per queue; members are ``<node>:<subscriber>``, scored by the time they
stop counting. Each process refreshes its own members; a crashed process's members
lapse after ``ttl_ms``.
"""

from __future__ import annotations

import time

from brokers.engine import AnyRedis


def registry_key(queue: str) -> str:
    """The sorted set of ``queue``'s subscribers."""
    return f"mq:vmq:subs:{{{queue}}}"


class SubscriberRegistry:
    """This process's view of, and entries in, the subscriber registry."""

    def __init__(self, redis: AnyRedis, node: str, ttl_ms: int) -> None:
        self._redis, self.node, self.ttl_ms = redis, node, ttl_ms

    @staticmethod
    def _now() -> int:
        return int(time.time() * 1000)

    async def add(self, queue: str, subscriber: str) -> None:
        await self._redis.zadd(
            registry_key(queue), {f"{self.node}:{subscriber}": self._now() + self.ttl_ms}
        )

    async def remove(self, queue: str, subscriber: str) -> None:
        await self._redis.zrem(registry_key(queue), f"{self.node}:{subscriber}")

    async def refresh(self, entries: list[tuple[str, str]]) -> None:
        """Extend this process's live entries ``(queue, subscriber)``."""
        if not entries:
            return
        expiry = self._now() + self.ttl_ms
        pipe = self._redis.pipeline(transaction=False)
        for queue, subscriber in entries:
            pipe.zadd(registry_key(queue), {f"{self.node}:{subscriber}": expiry}, xx=True)
        await pipe.execute()

    async def count(self, queue: str) -> int:
        """Live subscribers of ``queue`` across the cluster."""
        key = registry_key(queue)
        now = self._now()
        await self._redis.zremrangebyscore(key, "-inf", now)
        return int(await self._redis.zcard(key))

    async def clear(self, queue: str) -> None:
        """Forget every subscriber of a deleted queue."""
        await self._redis.delete(registry_key(queue))
