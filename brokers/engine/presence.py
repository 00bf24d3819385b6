"""Presence: which members are in a room right now, counted across every process.

A room is one sorted set (:func:`~brokers.engine.keys.presence_key`) whose members are
``<owner>:<member>``, scored by the time (ms) they stop counting. Each process joins,
leaves and renews its own members; the members of a process that died lapse after
``ttl_ms`` and are dropped the next time the room is counted. Rooms live in a ``space`` so
that unrelated users of presence never share a room.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from brokers.engine.keys import presence_key
from brokers.engine.redisio import AnyRedis


class Presence:
    """One process's (``owner``'s) entries in, and view of, the rooms of ``space``."""

    def __init__(
        self,
        redis: AnyRedis,
        space: str,
        owner: str,
        ttl_ms: int,
        now_ms: Callable[[], int],
    ) -> None:
        self._redis, self.space, self.owner, self.ttl_ms = redis, space, owner, ttl_ms
        self._now_ms = now_ms

    def _key(self, room: str) -> str:
        return presence_key(self.space, room)

    def _entry(self, member: str) -> str:
        return f"{self.owner}:{member}"

    async def join(self, room: str, member: str) -> None:
        """``member`` is in ``room`` for the next ``ttl_ms``."""
        expiry = self._now_ms() + self.ttl_ms
        await self._redis.zadd(self._key(room), {self._entry(member): expiry})

    async def leave(self, room: str, member: str) -> None:
        """``member`` left ``room``."""
        await self._redis.zrem(self._key(room), self._entry(member))

    async def renew(self, entries: Iterable[tuple[str, str]]) -> None:
        """Extend this owner's entries ``(room, member)`` that are still there (one round
        trip; an entry dropped meanwhile — its room cleared — is not brought back)."""
        entries = list(entries)
        if not entries:
            return
        expiry = self._now_ms() + self.ttl_ms
        pipe = self._redis.pipeline(transaction=False)
        for room, member in entries:
            pipe.zadd(self._key(room), {self._entry(member): expiry}, xx=True)
        await pipe.execute()

    async def count(self, room: str) -> int:
        """Members of ``room`` across every owner whose entries have not lapsed."""
        key = self._key(room)
        await self._redis.zremrangebyscore(key, "-inf", self._now_ms())
        return int(await self._redis.zcard(key))

    async def clear(self, room: str) -> None:
        """Forget every member of ``room`` (of every owner)."""
        await self._redis.delete(self._key(room))
