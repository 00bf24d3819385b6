"""Long-poll wake-ups: one pub/sub connection per engine, fanned out to waiters.

Scripts that make messages available (append, commit, lock release) PUBLISH the
partition number on ``mq:n:<topic>``. The notifier subscribes to a topic's channel the
first time someone waits on it, and only lets the waiter re-check after Redis confirmed
the subscription, so a message appended between the check and the wait always wakes
it. Nothing polls Redis: a waiter sleeps until a notification, its own deadline, or a
hint (lock expiry, delay, retry due) the caller computed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import defaultdict
from collections.abc import AsyncIterator, Iterable

from brokers.engine.background import cancel_and_wait
from brokers.engine.keys import PREFIX, notify_channel
from brokers.engine.redisio import AnyRedis

log = logging.getLogger(__name__)
_SENTINEL = f"{PREFIX}:n"


class Wakeup(asyncio.Event):
    """A waiter's event; ``group`` waiters compete for the same messages.

    Besides being set, it collects the partitions named by the notifications that woke
    it (:meth:`take`), so a fetcher can look at just those instead of every partition.
    """

    def __init__(self, group: str | None) -> None:
        super().__init__()
        self.group = group
        self._hints: set[int] = set()
        self._full = False  # woken without a partition: everything must be re-checked

    def hint(self, partition: int | None) -> None:
        """Set the event for ``partition`` (None: for anything)."""
        if partition is None:
            self._full = True
        else:
            self._hints.add(partition)
        self.set()

    def forget(self, partition: int) -> None:
        """Drop ``partition`` from the hints (the event stays set: a look at nothing is free)."""
        self._hints.discard(partition)

    def take(self) -> set[int] | None:
        """Clear the event; the partitions it was set for, or None when a notification
        named none (the caller re-checks everything)."""
        self.clear()
        hints, full = self._hints, self._full
        self._hints, self._full = set(), False
        return None if full else hints


class Notifier:
    """Fans topic notifications out to in-process waiters.

    Waiters without a group are all woken by every notification. Waiters of one group
    (one consumer group competing for the same partitions) are woken one at a time: the
    first idle one per notification gets it with the partition it names (a busy one when
    none is idle: it looks at the partition when it is done). A waiter that takes
    messages and leaves hands the partitions it did not get to on to the next waiter
    (:meth:`pass_on`). A notification so costs one fetcher of a group one look at one
    partition, instead of every parked fetcher re-reading every partition.
    """

    def __init__(self, client: AnyRedis) -> None:
        self._client = client
        self._waiters: dict[str, list[Wakeup]] = defaultdict(list)
        self._generation = 0  # bumped whenever the subscription connection is lost
        self._unnamed: dict[str, int] = defaultdict(int)  # notifications naming no partition
        self._confirmed: dict[str, asyncio.Future[None]] = {}
        self._pubsub = None
        self._task: asyncio.Task[None] | None = None
        self._start_lock = asyncio.Lock()

    def stamp(self, topic: str) -> tuple[int, int] | None:
        """While ``topic``'s notifications are being received: a value that changes with every
        notification naming no partition (a retry added or made due) and with every lost
        connection — so "nothing changed since" can be told without asking Redis. None when
        they are not being received."""
        fut = self._confirmed.get(notify_channel(topic))
        if fut is None or not fut.done() or fut.cancelled():
            return None
        return self._generation, self._unnamed[topic]

    def parked(self, topic: str) -> int:
        """Waiters currently parked on ``topic``."""
        return len(self._waiters.get(topic, ()))

    @property
    def total_parked(self) -> int:
        return sum(len(w) for w in self._waiters.values())

    async def _start(self) -> None:
        async with self._start_lock:
            if self._task is not None:
                return
            self._pubsub = self._client.pubsub()
            await self._pubsub.subscribe(_SENTINEL)
            self._task = asyncio.create_task(self._run(), name="engine-notifier")

    async def close(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None
        if self._pubsub is not None:
            with contextlib.suppress(Exception):
                await self._pubsub.aclose()
            self._pubsub = None
        self._confirmed.clear()
        self._generation += 1

    async def _subscribe(self, topic: str) -> None:
        await self._start()
        channel = notify_channel(topic)
        fut = self._confirmed.get(channel)
        if fut is None:
            fut = asyncio.get_running_loop().create_future()
            self._confirmed[channel] = fut
            await self._pubsub.subscribe(channel)  # type: ignore[union-attr]
        await asyncio.wait_for(asyncio.shield(fut), 5.0)

    @contextlib.asynccontextmanager
    async def watch(self, topic: str, group: str | None = None) -> AsyncIterator[Wakeup]:
        """An event set when ``topic`` gets a notification while inside the block.

        Without ``group`` every notification sets it; with one, see the class docstring
        (call :meth:`pass_on` after taking messages).
        """
        event = Wakeup(group)
        self._waiters[topic].append(event)
        try:
            await self._subscribe(topic)
            yield event
        finally:
            waiters = self._waiters.get(topic)
            if waiters is not None:
                with contextlib.suppress(ValueError):
                    waiters.remove(event)
                if not waiters:
                    del self._waiters[topic]

    def pass_on(
        self, topic: str, event: Wakeup, extra: Iterable[int] = (), taken: int | None = None
    ) -> None:
        """``event``'s waiter took messages (from partition ``taken``, now locked for its
        group, so no other waiter of the group need look there) and is leaving: hand the
        partitions it was woken for and did not look at, and ``extra`` ones (known to hold
        more), to the next waiter of its group."""
        if event.group is None:
            return
        if taken is not None:
            for other in self._waiters.get(topic, ()):
                if other.group == event.group:
                    other.forget(taken)
        left = event.take()
        if left is not None:
            left.update(extra)
            if not left:
                return
        idle = busy = None
        for other in self._waiters.get(topic, ()):
            if other is event or other.group != event.group:
                continue
            if not other.is_set():
                idle = other
                break
            busy = busy or other
        target = idle or busy
        if target is None:
            return
        if left is None:
            target.hint(None)
        else:
            for partition in left:
                target.hint(partition)

    def _wake(self, topic: str, partition: int | None) -> None:
        waiters = self._waiters.get(topic)
        if not waiters:
            return
        woken: set[str] = set()
        busy: dict[str, Wakeup] = {}
        for event in waiters:
            group = event.group
            if group is None:
                event.hint(partition)
            elif group not in woken:
                if not event.is_set():
                    woken.add(group)
                    event.hint(partition)
                else:
                    busy.setdefault(group, event)
        for group, event in busy.items():
            if group not in woken:
                event.hint(partition)

    def _wake_all(self) -> None:
        """The connection was lost: every waiter re-checks everything."""
        for waiters in self._waiters.values():
            for event in waiters:
                event.hint(None)

    async def _run(self) -> None:
        prefix = notify_channel("")
        while True:
            try:
                # blocking read: no poll timer per message (a busy broker gets thousands)
                msg = await self._pubsub.get_message(timeout=None)  # type: ignore[union-attr]
            except asyncio.CancelledError:
                raise
            except Exception:  # connection lost: wake everyone, resubscribe lazily
                log.warning("notification connection lost; waking waiters", exc_info=True)
                for fut in self._confirmed.values():
                    if not fut.done():
                        fut.cancel()
                self._confirmed.clear()
                self._generation += 1
                self._wake_all()
                await asyncio.sleep(0.5)
                with contextlib.suppress(Exception):
                    await self._pubsub.aclose()  # type: ignore[union-attr]
                self._pubsub = self._client.pubsub()
                with contextlib.suppress(Exception):
                    await self._pubsub.subscribe(_SENTINEL)
                continue
            if msg is None:
                continue
            channel = msg.get("channel")
            if isinstance(channel, bytes):
                channel = channel.decode()
            kind = msg.get("type")
            if isinstance(kind, bytes):
                kind = kind.decode()
            if kind == "subscribe":
                fut = self._confirmed.get(channel)
                if fut is not None and not fut.done():
                    fut.set_result(None)
            elif kind == "message" and channel.startswith(prefix):
                topic, partition = channel[len(prefix) :], _partition(msg.get("data"))
                if partition is None:
                    self._unnamed[topic] += 1
                self._wake(topic, partition)


def _partition(data: object) -> int | None:
    """The partition a notification names (None if it names none)."""
    try:
        return int(data)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        return None
