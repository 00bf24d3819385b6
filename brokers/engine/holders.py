"""Lease holders: what a process that dies held for its connections is handed on at once.

A consumer group's leased ranges (zbus sessions, VibeMQ subscribers) and a pull
consumer's partition locks taken for a connection (JMQ4) name who holds them (``owner``).
A server releases what a connection held when it closes; when the whole process dies
nobody does, and its leases — messages in flight to its clients and what it had read
ahead — were due again only when they expired (the group's lease time: 10 minutes for zbus
sessions), its locks kept their partitions from every other consumer until the ack
timeout (300 s by default). So each engine that leases or locks for connections is a
*holder* with an id of its own:

- every owner it leases for is stored as ``<holder>/<owner>``;
- its first lease in a group records the group under the holder (``{holder:<id>}``, scored
  by when the leases registered end; renewed as leasing goes on, trimmed once they ended);
- while the process lives it renews its entry in ``{holders}`` (scored by when it lapses)
  every third of ``ttl_ms``;
- what it leases from a group's retry store (a push lease, or a fetch for a connection)
  is recorded beside the store (:meth:`~brokers.engine.keys.RetryKeys.held`);
- the fan-out members it joined for its connections are recorded under it too
  (:meth:`Holders.hold_member`), with how long each one's progress is kept once it leaves;
- every holder sweeps: an entry lapsed for ``ttl_ms`` more is a dead process. The sweeper
  claims it (one script: removed only if still lapsed), and in each group the dead holder
  recorded its leased ranges and retries are due again at once, marked redelivered — as
  when a connection closes — and its partition locks are dropped; its members leave, as
  when their connections close (a connection's own member's progress goes, a durable
  member's is kept its while). Before, a crashed broker's members stayed members for good:
  a fan-out consumer lagged by its ghosts' lag, and their progress was never deleted. A
  lease that had expired before is left to be what expiry makes it, a failed attempt. At
  least once: a message a dead process's client had handled but not acked is delivered
  again.

Liveness is wall-clock time, whatever clock the engine stamps messages with. A process
that stops renewing for two ``ttl_ms`` (paused, cut off from Redis) is taken for dead; when
it renews again it finds its entry gone, knows its leases were handed on, and records its
groups again as it leases. A closing engine hands on what it still holds itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
import uuid
from collections.abc import Awaitable, Callable

import orjson
from redis.exceptions import RedisError

from brokers.engine.background import cancel_and_wait
from brokers.engine.keys import holder_groups_key, holder_members_key, holders_key
from brokers.engine.redisio import AnyRedis, Script

log = logging.getLogger("mqcloud.engine")

DEFAULT_TTL_MS = 15_000
REFRESH_MS = 60_000
"""A group's record is written again when a new lease ends this much later than the
record says (and trimmed this long after it): one write per group and minute at most."""
SWEEP_BATCH = 16  # dead holders claimed per sweep

Release = Callable[[str, str, str | None, str], Awaitable[int]]
"""(topic, app, client_id, owner prefix) → ranges made due again."""
Leave = Callable[[str, str, str, int | None], Awaitable[None]]
"""(topic, app, member, keep_ms) → the fan-out member left (its progress kept keep_ms)."""

CLAIM = Script(
    """
-- KEYS: holders. ARGV: holder, lapsed before (ms). Removes the holder if its entry lapsed
-- before then (not renewed meanwhile); 1 when this call removed it.
local at = redis.call('ZSCORE', KEYS[1], ARGV[1])
if at and tonumber(at) < tonumber(ARGV[2]) then
  redis.call('ZREM', KEYS[1], ARGV[1])
  return 1
end
return 0
"""
)


def group_member(topic: str, app: str, client_id: str | None) -> bytes:
    """A consumer group as a holder's record names it."""
    return orjson.dumps([topic, app, client_id])


def parse_group(member: bytes) -> tuple[str, str, str | None] | None:
    """The (topic, app, client_id) of a record; None when it is not one."""
    try:
        topic, app, client_id = orjson.loads(member)
    except (orjson.JSONDecodeError, TypeError, ValueError):
        return None
    if not isinstance(topic, str) or not isinstance(app, str):
        return None
    return topic, app, client_id if isinstance(client_id, str) else None


class Holders:
    """This process's lease-holder identity, its renewal and the sweep of dead holders."""

    def __init__(
        self,
        redis: AnyRedis,
        release: Release,
        *,
        leave: Leave | None = None,
        ttl_ms: int = DEFAULT_TTL_MS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._redis = redis
        self._release = release
        self._leave = leave
        self.ttl_ms = ttl_ms
        self._clock = clock
        self.id = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self._registered: dict[tuple[str, str, str | None], int] = {}
        """Group → when the leases its record covers end."""
        self._task: asyncio.Task[None] | None = None
        self._renewed = False
        self._closed = False

    def _now(self) -> int:
        return int(self._clock() * 1000)

    def owner(self, owner: str) -> str:
        """How ``owner``'s leases are stored: under this holder."""
        return f"{self.id}/{owner}"

    async def register(self, topic: str, app: str, client_id: str | None, lease_ms: int) -> None:
        """This process leases in the group (``topic``, ``app``, ``client_id``) for
        ``lease_ms`` from now; a Redis write only when the group is new to it, or once its
        record is a minute behind."""
        until = self._now() + max(0, lease_ms)
        group = (topic, app, client_id)
        if self._registered.get(group, -1) + REFRESH_MS >= until:
            return
        self.start()
        member = group_member(topic, app, client_id)
        await self._redis.zadd(holder_groups_key(self.id), {member: until}, gt=True)
        self._registered[group] = until

    async def hold_member(self, topic: str, app: str, member: str, keep_ms: int | None) -> None:
        """Fan-out ``member`` of ``app``'s group on ``topic`` joined for a connection of
        this process: if the process dies, it leaves (its progress kept ``keep_ms``, or
        deleted with None)."""
        self.start()
        keep = "-" if keep_ms is None else str(max(1, keep_ms))
        await self._redis.hset(holder_members_key(self.id), group_member(topic, app, member), keep)

    async def drop_member(self, topic: str, app: str, member: str) -> None:
        """``member`` left: nothing to do for it if this process dies."""
        await self._redis.hdel(holder_members_key(self.id), group_member(topic, app, member))

    # ------------------------------------------------------------------ renewal

    def start(self) -> None:
        """Renew and sweep from now on (a broker process starts at once, so that it hands
        on a dead process's leases even before it leases itself; any other engine starts
        with its first lease). The first round runs at once."""
        if self._task is None and not self._closed:
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name=f"lease-holder {self.id}"
            )

    async def _renew(self) -> None:
        """Renew this holder's entry; trim the records whose leases all ended."""
        now = self._now()
        added = await self._redis.zadd(holders_key(), {self.id: now + self.ttl_ms})
        renewed, self._renewed = self._renewed, True
        if added and renewed:
            log.warning(
                "lease holder %s was taken for dead (not renewed for %d ms): its leases were"
                " handed on; recording its groups again",
                self.id,
                2 * self.ttl_ms,
            )
            self._registered.clear()
        ended = now - REFRESH_MS
        for group in [g for g, until in self._registered.items() if until < ended]:
            del self._registered[group]
        await self._redis.zremrangebyscore(holder_groups_key(self.id), "-inf", ended)

    async def _run(self) -> None:
        while True:
            try:
                await self._renew()
                await self.sweep()
            except asyncio.CancelledError:
                raise
            except (RedisError, OSError) as exc:  # a Redis outage: the next round retries
                log.info("lease holder %s: renewal or sweep failed: %s", self.id, exc)
            except Exception:
                log.exception("lease holder %s: renewal or sweep failed", self.id)
            await asyncio.sleep(self.ttl_ms / 3000)

    # ------------------------------------------------------------------ sweep

    async def sweep(self) -> int:
        """Hand on the leases of holders lapsed for ``ttl_ms`` more (dead processes); how
        many ranges were made due again."""
        lapsed_before = self._now() - self.ttl_ms
        dead = await self._redis.zrangebyscore(
            holders_key(), "-inf", f"({lapsed_before}", start=0, num=SWEEP_BATCH
        )
        released = 0
        for raw in dead:
            holder = raw.decode() if isinstance(raw, bytes) else str(raw)
            if holder == self.id:
                continue
            if not int(await CLAIM(self._redis, (holders_key(),), (holder, lapsed_before))):
                continue  # renewed meanwhile, or another sweeper claimed it
            try:
                released += await self._hand_on(holder, "is gone")
            except BaseException:
                # put it back, still lapsed: the next sweep (anybody's) finishes the job
                with contextlib.suppress(RedisError, OSError):
                    await self._redis.zadd(holders_key(), {holder: lapsed_before - 1}, nx=True)
                raise
        return released

    async def _hand_on(self, holder: str, why: str) -> int:
        """Make every range ``holder`` leased due again, then forget its record."""
        key = holder_groups_key(holder)
        members = await self._redis.zrange(key, 0, -1)
        released = 0
        for member in members:
            group = parse_group(member)
            if group is None:
                continue
            released += await self._release(*group, f"{holder}/")
        await self._redis.delete(key)  # only once all is handed on (a retry redoes it all)
        left = await self._members_leave(holder)
        if left:
            log.warning("lease holder %s %s: %d fan-out members left", holder, why, left)
        if released:
            log.warning(
                "lease holder %s %s: %d leased ranges in %d groups are due again",
                holder,
                why,
                released,
                len(members),
            )
        return released

    async def _members_leave(self, holder: str) -> int:
        """Every fan-out member ``holder`` recorded leaves; then its record goes."""
        key = holder_members_key(holder)
        entries = await self._redis.hgetall(key)
        left = 0
        for raw, keep in entries.items():
            group = parse_group(raw)
            if group is None or group[2] is None or self._leave is None:
                continue
            kept = keep.decode() if isinstance(keep, bytes) else str(keep)
            await self._leave(group[0], group[1], group[2], int(kept) if kept.isdigit() else None)
            left += 1
        await self._redis.delete(key)
        return left

    # ------------------------------------------------------------------ close

    async def close(self) -> None:
        """Stop renewing and hand on what this process still holds (its servers released
        what their connections held; what is left — read ahead, or of connections not
        closed — would otherwise wait for the leases to expire)."""
        self._closed = True
        task, self._task = self._task, None
        if task is None:
            return
        await cancel_and_wait(task)
        with contextlib.suppress(RedisError, OSError):
            await self._redis.zrem(holders_key(), self.id)
            await self._hand_on(self.id, "closes")
        self._registered.clear()
