"""Per-minute produce/consume counts and bytes per topic, app and broker, consume
failures per consumer group and refused messages per producer.

Counts accumulate in process memory and are flushed (HINCRBY, one pipeline) at most once
per ``interval_s`` — and at the latest ``interval_s`` after they were counted — and on
:meth:`Counters.flush`/close, so the append path pays no extra round trip.

Storage: one hash per (dimension, name, UTC day), expiring after 30 days:

* traffic: dimensions ``topic``, ``app`` and ``broker``, fields
  ``<minute of day>:<p|pb|c|cb>``, and the day's totals ``day:<p|pb|c|cb>`` (a day's
  traffic of thousands of topics is then one field each, not 1,440);
* a group's failures (a message a consumer failed: a nack, a JMQ4 retry ack, a failed
  retry, a lapsed fetch lock), offset moves (a client's forceAck rewound or skipped
  its committed offset, or a fetch found it outside its partition) and held-back
  send-backs (failed messages its topic's send-back limit kept out of the retry store:
  delivered again instead): dimension ``group``, name ``<topic>:<app>`` (neither holds
  a ``:``), fields ``<minute of day>:f``, ``<minute of day>:m`` and ``<minute of day>:s``;
* a producer's refused messages (:data:`REFUSALS`: over its rate limit, too large,
  invalid, not allowed, its queue full): dimension ``producer``, name ``<topic>:<app>``,
  fields ``<minute of day>:x:<kind>``; the producers with refusals on a day are kept in
  one set (:func:`refused_producers_key`), so finding them costs no scan.

A crash loses at most the last interval of counts; messages are unaffected.
"""

from __future__ import annotations

import calendar
import logging
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from brokers.engine.flush_timer import FlushTimer
from brokers.engine.keys import counter_key
from brokers.engine.reconnect import log_retried
from brokers.engine.redisio import AnyRedis

log = logging.getLogger(__name__)
RETENTION_S = 30 * 24 * 3600
FIELDS = ("p", "pb", "c", "cb")
DAY = "day"
"""The slot of a traffic hash's day totals (``day:<field>``), beside its minutes."""
TOTALS_BATCH = 500
"""Names whose day totals one pipeline reads (:meth:`Counters.day_totals`)."""
FAILED, MOVED, HELD_BACK = "f", "m", "s"
"""The fields of a group's counts: messages failed, offset moves, send-backs held back."""
REFUSALS = ("rate_limited", "too_large", "invalid", "not_allowed", "queue_full")
"""Why the engine refused a producer's message: what the producer can change."""


def refused_producers_key(day: str) -> str:
    """Set of the producers (``<topic>:<app>``) with refused messages on ``day``."""
    return counter_key("refused", "producers", day)


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
        self._pending: dict[tuple[str, str, int], list[int]] = defaultdict(lambda: [0, 0, 0, 0])
        self._grouped: dict[tuple[str, int, str], int] = defaultdict(int)
        """(group name, minute, FAILED, MOVED or HELD_BACK) → events not yet flushed."""
        self._refused: dict[tuple[str, int, str], int] = defaultdict(int)
        """(producer name, minute, kind) → refused messages not yet flushed."""
        self._flusher = FlushTimer(self.flush, interval_s, eager=True)
        """Flushes now if the last flush is an interval old, else once it is: counts
        recorded just after a flush, with nothing after them, land within the interval
        too (they waited for the next count, which might never come)."""

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
        self._flusher.request()

    def failed(self, *, topic: str, app: str, count: int) -> None:
        """Count ``count`` messages that ``app``'s consumers failed on ``topic`` now."""
        self._count_group(topic, app, FAILED, count)

    def moved(self, *, topic: str, app: str, count: int = 1) -> None:
        """Count ``count`` offset moves of ``app``'s consumer of ``topic`` now."""
        self._count_group(topic, app, MOVED, count)

    def held_back(self, *, topic: str, app: str, count: int) -> None:
        """Count ``count`` failed messages of ``app``'s consumer of ``topic`` that the
        topic's send-back limit kept out of the retry store now (delivered again)."""
        self._count_group(topic, app, HELD_BACK, count)

    def _count_group(self, topic: str, app: str, what: str, count: int) -> None:
        if count > 0:
            self._grouped[(_group(topic, app), int(self._clock() // 60), what)] += count
            self._flusher.request()

    def refused(self, *, topic: str, app: str, kind: str, count: int = 1) -> None:
        """Count ``count`` messages of ``app`` refused on ``topic`` now, for ``kind``
        (one of :data:`REFUSALS`)."""
        if count > 0:
            self._refused[(_group(topic, app), int(self._clock() // 60), kind)] += count
            self._flusher.request()

    async def flush(self) -> None:
        """Write buffered counts to Redis."""
        if not self._pending and not self._grouped and not self._refused:
            return
        pending, self._pending = self._pending, defaultdict(lambda: [0, 0, 0, 0])
        grouped, self._grouped = self._grouped, defaultdict(int)
        refused, self._refused = self._refused, defaultdict(int)
        pipe = self._client.pipeline(transaction=False)
        keys: set[str] = set()
        for (name, minute, kind), value in refused.items():
            key = counter_key("producer", name, _day(minute))
            keys.add(key)
            pipe.hincrby(key, f"{minute % 1440}:x:{kind}", value)
            listed = refused_producers_key(_day(minute))
            keys.add(listed)
            pipe.sadd(listed, name)
        for (name, minute, what), value in grouped.items():
            key = counter_key("group", name, _day(minute))
            keys.add(key)
            pipe.hincrby(key, f"{minute % 1440}:{what}", value)
        for (dim, name, minute), row in pending.items():
            key = counter_key(dim, name, _day(minute))
            keys.add(key)
            slot = minute % 1440
            for field, value in zip(FIELDS, row, strict=True):
                if value:
                    pipe.hincrby(key, f"{slot}:{field}", value)
                    pipe.hincrby(key, f"{DAY}:{field}", value)
        for key in keys:
            pipe.expire(key, RETENTION_S)
        try:
            await pipe.execute()
        except Exception as exc:  # keep the counts for the next flush
            log_retried(log, exc, "counter flush failed; will retry")
            for k, row in pending.items():
                cur = self._pending[k]
                for i in range(4):
                    cur[i] += row[i]
            for gk, value in grouped.items():
                self._grouped[gk] += value
            for rk, value in refused.items():
                self._refused[rk] += value
            self._flusher.retry()

    async def close(self) -> None:
        await self._flusher.close()
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
                if slot == DAY:
                    continue
                minute = base // 60 + int(slot)
                if first <= minute <= last:
                    rows[minute][FIELDS.index(kind)] += int(value)
        return [MinuteTraffic(m * 60_000, *rows[m]) for m in sorted(rows)]

    async def day_totals(
        self, dimension: str, names: Sequence[str], day: str
    ) -> dict[str, MinuteTraffic]:
        """The traffic of each of ``names`` (of ``dimension``) on UTC ``day``
        (``YYYYMMDD``), from the day's totals: one field read per count and name,
        pipelined :data:`TOTALS_BATCH` names at a time (names without traffic left out).
        ``minute_ms`` is the day's start."""
        start_ms = calendar.timegm(time.strptime(day, "%Y%m%d")) * 1000
        fields = [f"{DAY}:{f}" for f in FIELDS]
        out: dict[str, MinuteTraffic] = {}
        for first in range(0, len(names), TOTALS_BATCH):
            batch = names[first : first + TOTALS_BATCH]
            pipe = self._client.pipeline(transaction=False)
            for name in batch:
                pipe.hmget(counter_key(dimension, name, day), fields)
            for name, values in zip(batch, await pipe.execute(), strict=True):
                counts = [int(v) if v is not None else 0 for v in values]
                if any(counts):
                    out[name] = MinuteTraffic(start_ms, *counts)
        return out

    async def grouped(
        self, groups: Sequence[tuple[str, str]], what: str, *, start_ms: int, end_ms: int
    ) -> dict[tuple[str, str], int]:
        """The ``what`` (FAILED, MOVED, HELD_BACK) of each consumer group ``(topic, app)`` in the
        whole minutes of ``[start_ms, end_ms)`` (groups without any left out): one
        pipelined round trip, each group's minutes read by name (HMGET), whatever the
        number of groups."""
        first, last = start_ms // 60_000, (end_ms - 1) // 60_000
        if last < first or not groups:
            return {}
        by_day: dict[str, list[int]] = defaultdict(list)
        for minute in range(first, last + 1):
            by_day[_day(minute)].append(minute % 1440)
        pipe = self._client.pipeline(transaction=False)
        for topic, app in groups:
            for day, slots in by_day.items():
                fields = [f"{s}:{what}" for s in slots]
                pipe.hmget(counter_key("group", _group(topic, app), day), fields)
        replies = iter(await pipe.execute())
        out: dict[tuple[str, str], int] = {}
        for pair in groups:
            total = sum(int(v) for _ in by_day for v in next(replies) if v is not None)
            if total:
                out[pair] = total
        return out

    async def refusals(
        self, *, start_ms: int, end_ms: int, app: str | None = None
    ) -> dict[tuple[str, str], dict[str, int]]:
        """The messages refused to each producer ``(topic, app)`` — of ``app`` only, when
        given — in the whole minutes of ``[start_ms, end_ms)``, by kind (producers without
        any left out): the day sets name the producers (two round trips whatever the
        number of producers; the hashes hold refusals only, so they are small)."""
        first, last = start_ms // 60_000, (end_ms - 1) // 60_000
        if last < first:
            return {}
        days = sorted({_day(m) for m in range(first, last + 1)})
        pipe = self._client.pipeline(transaction=False)
        for day in days:
            pipe.smembers(refused_producers_key(day))
        names = sorted({n.decode() for found in await pipe.execute() for n in found})
        if app is not None:
            names = [n for n in names if n.partition(":")[2] == app]
        pipe = self._client.pipeline(transaction=False)
        for name in names:
            for day in days:
                pipe.hgetall(counter_key("producer", name, day))
        replies = iter(await pipe.execute())
        bases = {day: calendar.timegm(time.strptime(day, "%Y%m%d")) // 60 for day in days}
        out: dict[tuple[str, str], dict[str, int]] = {}
        for name in names:
            kinds: dict[str, int] = defaultdict(int)
            for day in days:
                base = bases[day]
                for field, value in next(replies).items():
                    slot, _, kind = field.decode().split(":", 2)
                    if first <= base + int(slot) <= last:
                        kinds[kind] += int(value)
            if kinds:
                topic, _, app = name.partition(":")
                out[(topic, app)] = dict(kinds)
        return out


def _group(topic: str, app: str) -> str:
    """A consumer group's name in the counters (a topic code and an app code hold no ``:``)."""
    return f"{topic}:{app}"
