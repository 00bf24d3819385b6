"""Per-minute produce/consume counts and bytes per topic, app and broker, and consume
failures per consumer group.

Counts accumulate in process memory and are flushed (HINCRBY, one pipeline) at most
once per ``interval_s`` and on :meth:`Counters.flush`/close, so the append path pays no
extra round trip. Storage: one hash per (dimension, name, UTC day), fields
``<minute of day>:<p|pb|c|cb>``, expiring after 30 days; a group's failures (a message a
consumer failed: a nack, a JMQ4 retry ack, a failed retry) in dimension ``group``, name
``<topic>:<app>`` (neither holds a ``:``), fields ``<minute of day>:f``. A crash loses at
most the last interval of counts; messages are unaffected.
"""

from __future__ import annotations

import asyncio
import calendar
import contextlib
import logging
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from brokers.engine.keys import counter_key
from brokers.engine.redisio import AnyRedis

log = logging.getLogger(__name__)
RETENTION_S = 30 * 24 * 3600
FIELDS = ("p", "pb", "c", "cb")


@dataclass(frozen=True, slots=True)
class MinuteTraffic:
    minute_ms: int
    produced: int
    produced_bytes: int
    consumed: int
    consumed_bytes: int


def _day(minute: int) -> str:
    return time.strftime("%Y%m%d", time.gmtime(minute * 60))


class Counters:
    """Buffered per-minute traffic counters."""

    def __init__(
        self, client: AnyRedis, clock: Callable[[], float], *, interval_s: float = 1.0
    ) -> None:
        self._client = client
        self._clock = clock
        self._interval = interval_s
        self._pending: dict[tuple[str, str, int], list[int]] = defaultdict(lambda: [0, 0, 0, 0])
        self._failed: dict[tuple[str, int], int] = defaultdict(int)
        """(group name, minute) → failures not yet flushed."""
        self._last_flush = time.monotonic()
        self._task: asyncio.Task[None] | None = None

    def record(
        self,
        *,
        topic: str,
        app: str,
        broker: int | None,
        produced: int = 0,
        produced_bytes: int = 0,
        consumed: int = 0,
        consumed_bytes: int = 0,
    ) -> None:
        """Count traffic now (buffered)."""
        minute = int(self._clock() // 60)
        dims = [("topic", topic), ("app", app)]
        if broker is not None:
            dims.append(("broker", str(broker)))
        for dim, name in dims:
            row = self._pending[(dim, name, minute)]
            row[0] += produced
            row[1] += produced_bytes
            row[2] += consumed
            row[3] += consumed_bytes
        self._flush_soon()

    def failed(self, *, topic: str, app: str, count: int) -> None:
        """Count ``count`` messages that ``app``'s consumers failed on ``topic`` now."""
        if count > 0:
            self._failed[(_group(topic, app), int(self._clock() // 60))] += count
            self._flush_soon()

    def _flush_soon(self) -> None:
        if time.monotonic() - self._last_flush >= self._interval and (
            self._task is None or self._task.done()
        ):
            self._task = asyncio.get_running_loop().create_task(self.flush())

    async def flush(self) -> None:
        """Write buffered counts to Redis."""
        self._last_flush = time.monotonic()
        if not self._pending and not self._failed:
            return
        pending, self._pending = self._pending, defaultdict(lambda: [0, 0, 0, 0])
        failed, self._failed = self._failed, defaultdict(int)
        pipe = self._client.pipeline(transaction=False)
        keys: set[str] = set()
        for (name, minute), value in failed.items():
            key = counter_key("group", name, _day(minute))
            keys.add(key)
            pipe.hincrby(key, f"{minute % 1440}:f", value)
        for (dim, name, minute), row in pending.items():
            key = counter_key(dim, name, _day(minute))
            keys.add(key)
            slot = minute % 1440
            for field, value in zip(FIELDS, row, strict=True):
                if value:
                    pipe.hincrby(key, f"{slot}:{field}", value)
        for key in keys:
            pipe.expire(key, RETENTION_S)
        try:
            await pipe.execute()
        except Exception:  # keep the counts for the next flush
            log.warning("counter flush failed; will retry", exc_info=True)
            for k, row in pending.items():
                cur = self._pending[k]
                for i in range(4):
                    cur[i] += row[i]
            for fk, value in failed.items():
                self._failed[fk] += value

    async def close(self) -> None:
        if self._task is not None:
            with contextlib.suppress(Exception):
                await self._task
        await self.flush()

    async def traffic(
        self, dimension: str, name: str, start_ms: int, end_ms: int
    ) -> list[MinuteTraffic]:
        """Per-minute traffic of a topic/app/broker in ``[start_ms, end_ms)`` (minutes with data)."""
        first, last = start_ms // 60_000, (end_ms - 1) // 60_000
        days = sorted({_day(m) for m in range(first, last + 1, 1440)} | {_day(last)})
        pipe = self._client.pipeline(transaction=False)
        for day in days:
            pipe.hgetall(counter_key(dimension, name, day))
        rows: dict[int, list[int]] = defaultdict(lambda: [0, 0, 0, 0])
        for day, data in zip(days, await pipe.execute(), strict=True):
            base = calendar.timegm(time.strptime(day, "%Y%m%d"))
            for field, value in data.items():
                slot, kind = field.decode().split(":")
                minute = base // 60 + int(slot)
                if first <= minute <= last:
                    rows[minute][FIELDS.index(kind)] += int(value)
        return [MinuteTraffic(m * 60_000, *rows[m]) for m in sorted(rows)]

    async def failures(
        self, groups: Sequence[tuple[str, str]], *, start_ms: int, end_ms: int
    ) -> dict[tuple[str, str], int]:
        """Failures of each consumer group ``(topic, app)`` in the whole minutes of
        ``[start_ms, end_ms)`` (groups without any left out): one pipelined round trip,
        each group's minutes read by name (HMGET), whatever the number of groups."""
        first, last = start_ms // 60_000, (end_ms - 1) // 60_000
        if last < first or not groups:
            return {}
        by_day: dict[str, list[int]] = defaultdict(list)
        for minute in range(first, last + 1):
            by_day[_day(minute)].append(minute % 1440)
        pipe = self._client.pipeline(transaction=False)
        for topic, app in groups:
            for day, slots in by_day.items():
                pipe.hmget(counter_key("group", _group(topic, app), day), [f"{s}:f" for s in slots])
        replies = iter(await pipe.execute())
        out: dict[tuple[str, str], int] = {}
        for pair in groups:
            total = sum(int(v) for _ in by_day for v in next(replies) if v is not None)
            if total:
                out[pair] = total
        return out


def _group(topic: str, app: str) -> str:
    """A consumer group's name in the counters (a topic code and an app code hold no ``:``)."""
    return f"{topic}:{app}"
