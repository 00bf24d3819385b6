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
from collections.abc import AsyncIterator

from brokers.engine.background import cancel_and_wait
from brokers.engine.keys import PREFIX, notify_channel
from brokers.engine.redisio import AnyRedis

log = logging.getLogger(__name__)
_SENTINEL = f"{PREFIX}:n"


class Wakeup(asyncio.Event):
    """A waiter's event; ``group`` waiters compete for the same messages."""

    def __init__(self, group: str | None) -> None:
        super().__init__()
        self.group = group
        self.seen = -1  # the notification number this waiter was last woken for


class Notifier:
    """Fans topic notifications out to in-process waiters.

    Waiters without a group are all woken by every notification. Waiters of one group
    (one consumer group competing for the same partitions) are woken one at a time: the
    first idle one per notification, and a waiter that then found messages passes the
    wake-up on to the next (there may be more), each at most once per notification. A
    notification so wakes one or two fetchers of a group instead of all of them, which
    kept a broker with many parked fetches busy re-reading Redis.
    """

    def __init__(self, client: AnyRedis) -> None:
        self._client = client
        self._waiters: dict[str, list[Wakeup]] = defaultdict(list)
        self._seq: dict[str, int] = defaultdict(int)
        self._confirmed: dict[str, asyncio.Future[None]] = {}
        self._pubsub = None
        self._task: asyncio.Task[None] | None = None
        self._start_lock = asyncio.Lock()

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
                    self._seq.pop(topic, None)

    def pass_on(self, topic: str, event: Wakeup) -> None:
        """``event``'s waiter took messages: wake the next idle waiter of its group."""
        seq = self._seq.get(topic)
        if seq is None or event.group is None:
            return
        for other in self._waiters.get(topic, ()):
            if other.group == event.group and not other.is_set() and other.seen < seq:
                other.seen = seq
                other.set()
                return

    def _wake(self, topic: str | None) -> None:
        if topic is None:  # the connection was lost: everyone re-checks
            for waiters in self._waiters.values():
                for event in waiters:
                    event.set()
            return
        waiters = self._waiters.get(topic)
        if not waiters:
            return
        self._seq[topic] += 1
        seq = self._seq[topic]
        woken: set[str] = set()
        for event in waiters:
            if event.group is None:
                event.set()
            elif event.group not in woken and not event.is_set():
                woken.add(event.group)
                event.seen = seq
                event.set()

    async def _run(self) -> None:
        prefix = notify_channel("")
        while True:
            try:
                msg = await self._pubsub.get_message(timeout=5.0)  # type: ignore[union-attr]
            except asyncio.CancelledError:
                raise
            except Exception:  # connection lost: wake everyone, resubscribe lazily
                log.warning("notification connection lost; waking waiters", exc_info=True)
                for fut in self._confirmed.values():
                    if not fut.done():
                        fut.cancel()
                self._confirmed.clear()
                self._wake(None)
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
                self._wake(channel[len(prefix) :])
