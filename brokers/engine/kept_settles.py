"""Settles Redis missed, made again in the background until they land.

A push consumer's deliveries are settled one way or another: acked, released (their
connection closed) or returned unread (read ahead, then not needed). When Redis is
unreachable at that moment the settle fails, and the deliveries stay leased until the
lease lapses — 10 minutes for a zbus MQ: a 0.3 s Redis blip under a fleet of long polls
held the read-ahead of the MQs whose hold ran out during the blip for that long (their
pollers waited, "caught up", for messages nobody would hand out), and an ack lost the
same way delivered its message again 10 minutes later.

So the engine keeps such settles (:class:`KeptSettles`) and makes them again from one
background task per engine, at growing intervals (:data:`FIRST_RETRY_S` doubling to
:data:`LAST_RETRY_S`), the indexes of one (mode, group, partition) merged into one call,
until they land. Only an unreachable Redis keeps a settle; any other failure is the
caller's. Kept settles are bounded (:data:`MAX_KEPT` indexes: past it the leases lapse
as before) and given up after :data:`GIVE_UP_S` (every lease has lapsed by then but a
policy's longer ack timeout's). On close nothing is waited for: the lease holder hands
on everything it still holds (:mod:`brokers.engine.holders`).

Settles are safe to make twice: an ack or a release of indexes already settled changes
nothing; a release made again after the lease lapsed and another consumer leased the
range hands it out once more (at least once, marked redelivered).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from brokers.engine.background import cancel_and_wait
from brokers.engine.errors import StoreUnavailable
from brokers.engine.reconnect import REDIS_DOWN

log = logging.getLogger(__name__)

MODES = ("ack", "release", "unread")
FIRST_RETRY_S = 0.1
LAST_RETRY_S = 2.0
GIVE_UP_S = 600.0
MAX_KEPT = 1_000_000
"""Indexes kept at most, over every group (a few tens of bytes each)."""

MISSED = (StoreUnavailable, *REDIS_DOWN)
"""What says Redis missed a settle made again: it is kept for the next round."""
Key = tuple[str, str, str, int, str | None]
"""(mode, topic, app, partition, client id)."""
Apply = Callable[[str, str, str, int, Sequence[int], str | None], Awaitable[int]]
"""Makes one settle: (mode, topic, app, partition, indexes, client id) → how many changed."""


@dataclass
class _Kept:
    indexes: set[int] = field(default_factory=set)
    since: float = field(default_factory=time.monotonic)


class KeptSettles:
    """The settles of one engine that Redis missed, and the task making them again."""

    def __init__(self, apply: Apply, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._apply = apply
        self._clock = clock
        self._kept: dict[Key, _Kept] = {}
        self._count = 0
        self._task: asyncio.Task[None] | None = None
        self._closed = False

    @property
    def count(self) -> int:
        """Indexes kept now."""
        return self._count

    def keep(
        self,
        mode: str,
        topic: str,
        app: str,
        partition: int,
        indexes: Sequence[int],
        client_id: str | None,
    ) -> None:
        """Keep a settle that failed because Redis was unreachable, to be made again."""
        if mode not in MODES:
            raise ValueError(f"not a settle mode: {mode!r}")
        if self._closed or not indexes:
            return
        key = (mode, topic, app, partition, client_id)
        kept = self._kept.get(key)
        if kept is None:
            kept = self._kept[key] = _Kept(since=self._clock())
        before = len(kept.indexes)
        room = MAX_KEPT - self._count
        new = [i for i in indexes if i not in kept.indexes]
        if len(new) > room:
            log.warning(
                "%d settles of %s for %s not kept (%d kept already): their leases lapse",
                len(new) - room,
                topic,
                app,
                self._count,
            )
            new = new[: max(0, room)]
        kept.indexes.update(new)
        self._count += len(kept.indexes) - before
        if not kept.indexes:
            del self._kept[key]
            return
        if self._task is None or self._task.done():
            log.warning("Redis unreachable: settles kept, made again once it answers")
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name="engine-kept-settles"
            )

    async def close(self) -> None:
        """Stop making kept settles again (the holder hands on what it still holds)."""
        self._closed = True
        await cancel_and_wait(self._task)
        self._task = None

    async def _run(self) -> None:
        delay = FIRST_RETRY_S
        while self._kept:
            await asyncio.sleep(delay)
            delay = FIRST_RETRY_S if await self._round() else min(LAST_RETRY_S, delay * 2)
        log.warning("kept settles made: Redis answers again")

    async def _round(self) -> bool:
        """Make every kept settle once; False at the first that Redis missed again."""
        for key in list(self._kept):
            kept = self._kept.get(key)
            if kept is None:
                continue
            if self._clock() - kept.since > GIVE_UP_S:
                self._forget(key)
                log.warning(
                    "%d kept %s settles of %s for %s given up after %.0f s: their leases lapse",
                    len(kept.indexes),
                    key[0],
                    key[1],
                    key[2],
                    GIVE_UP_S,
                )
                continue
            mode, topic, app, partition, client_id = key
            indexes = sorted(kept.indexes)
            try:
                await self._apply(mode, topic, app, partition, indexes, client_id)
            except MISSED:
                return False
            except Exception:
                log.exception("kept %s settle of %s for %s dropped", mode, topic, app)
            self._forget(key, indexes)
        return True

    def _forget(self, key: Key, indexes: Sequence[int] | None = None) -> None:
        kept = self._kept.get(key)
        if kept is None:
            return
        before = len(kept.indexes)
        if indexes is None:
            kept.indexes.clear()
        else:
            kept.indexes.difference_update(indexes)
        self._count -= before - len(kept.indexes)
        if not kept.indexes:
            del self._kept[key]
