"""Producer statistics: how long each producer's appends took, per client host, in fixed
latency buckets per hour, kept 10 days; and how many of its messages failed, per host.

Every append through the facade (``append`` and ``append_many``: every protocol) counts
its messages in the bucket of the call's time, from the call to the store's
acknowledgement at the messages' QoS: the part of a client's send latency the platform
answers for (the client's own queueing and the network are not in it). None of the four
wire protocols has a command for clients to report their own figures, so the broker
measures them: every client, whatever it was written with, is covered. Messages the
engine refused or could not store are counted as failed (why is in the producer's
refusals, :mod:`brokers.engine.counters`).

Buffered in memory and written (HINCRBY, one pipeline) at most once per ``interval_s``
(:data:`FLUSH_S`: statistics by the hour need no fresher figures, and a flush costs a
field per producer, host and bucket active since the last, whatever the messages).
Storage: per producer (``<topic>:<app>``) one hash per UTC hour, kept
:data:`HOUR_RETENTION_S`, and one per UTC day, kept :data:`DAY_RETENTION_S`, both with
fields ``<client host>|<bucket>`` (an index into
:data:`~brokers.engine.latency.BOUNDS_MS`, the last one slower than all of them) and
``<client host>|f`` (failed). A window of up to a day reads the hours (two hashes per
producer for the last hour), a longer one the days (eleven for the ten days kept), so
an app producing to thousands of topics is read in a few pipelined round trips and never
transfers a day's detail for its last hour. A client host is the address's host (its
port left out: each connection has its own), cut to what a field can hold.
"""

from __future__ import annotations

import functools
import logging
import re
import time
from bisect import bisect_left
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from brokers.engine.flush_timer import FlushTimer
from brokers.engine.keys import counter_key
from brokers.engine.latency import BOUNDS_MS, bucket_of
from brokers.engine.redisio import AnyRedis

log = logging.getLogger("mqcloud.engine")

HOUR_RETENTION_S = 2 * 24 * 3600
"""An hour's hash outlives the longest window read by hours (a day and the hour begun)."""
DAY_RETENTION_S = 11 * 24 * 3600
"""A day's hash lives 11 days after its last write: the 10 days kept and the day begun."""
DIMENSION = "platency"
DAY_DIMENSION = "platency-day"
BY_HOURS = 24
"""Windows up to this many hours are read by the hour, longer ones by the UTC day."""
FAILED = "f"
BUCKETS = len(BOUNDS_MS) + 1
FLUSH_S = 10.0
"""How often a process writes what it counted (at most; a burst after a quiet spell at
once). 5,000 producers with 3 hosts each, all active, cost a flush of about a second of
this process's CPU (``bench/producer_stats.py``): every 10 s, not every second."""
READ_BATCH = 500
"""Hashes read per pipelined round trip."""
MAX_HOURS = 240
"""The longest window a read covers: the 10 days kept."""
_UNSAFE = re.compile(r"[^0-9A-Za-z.:%_\-]")
UNKNOWN_CLIENT = "unknown"


@functools.lru_cache(maxsize=4096)
def client_host(address: str | None) -> str:
    """The host of a client address (``host:port``, ``[v6]:port``, a bare host or IPv6
    address), made safe for a field name: at most 64 characters of letters, digits and
    ``.:%_-``; :data:`UNKNOWN_CLIENT` when nothing is left."""
    if not address:
        return UNKNOWN_CLIENT
    if address.startswith("["):
        host = address[1:].partition("]")[0]
    elif address.count(":") == 1:
        host = address.partition(":")[0]
    else:
        host = address
    host = _UNSAFE.sub("", host)[:64]
    return host or UNKNOWN_CLIENT


def _hour(seconds: float) -> str:
    return time.strftime("%Y%m%d%H", time.gmtime(seconds))


def _day_of(hour: str) -> str:
    return hour[:8]


@dataclass(frozen=True, slots=True)
class ClientLatency:
    """One client host's appends to one producer's topic over a window."""

    buckets: tuple[int, ...]
    """Messages per bucket of :data:`BOUNDS_MS` (the last: slower than all of them)."""
    failed: int

    @property
    def messages(self) -> int:
        """Messages stored."""
        return sum(self.buckets)

    def percentile(self, share: float) -> int | None:
        """The upper bound (ms) of the bucket holding the ``share`` percentile of the
        stored messages (0.99: p99); None when none was stored, or it is slower than the
        largest bound."""
        b = bucket_of(self.buckets, share)
        return BOUNDS_MS[b] if b is not None and b < len(BOUNDS_MS) else None


class ProduceLatencies:
    """Buffered per-hour latency buckets and failures of producers, per client host."""

    def __init__(
        self, client: AnyRedis, clock: Callable[[], float], *, interval_s: float = FLUSH_S
    ) -> None:
        self._client = client
        self._clock = clock
        self._pending: dict[tuple[str, str, str], list[int]] = {}
        """(producer name, hour, client host) → counts per bucket, then failed."""
        self._flusher = FlushTimer(self.flush, interval_s, eager=True)
        self._hour = (-1, "")
        """The hour appends count in now: (its number since the epoch, its name)."""

    def _row(self, topic: str, app: str, address: str | None) -> list[int]:
        now = self._clock()
        number = int(now // 3600)
        if number != self._hour[0]:
            self._hour = (number, _hour(now))
        key = (f"{topic}:{app}", self._hour[1], client_host(address))
        row = self._pending.get(key)
        if row is None:
            row = self._pending[key] = [0] * (BUCKETS + 1)
        self._flusher.request()
        return row

    def stored(self, topic: str, app: str, address: str | None, seconds: float, count: int) -> None:
        """``count`` messages of ``app`` from ``address`` stored on ``topic`` by a call
        that took ``seconds``."""
        if count > 0:
            self._row(topic, app, address)[bisect_left(BOUNDS_MS, seconds * 1000.0)] += count

    def failed(self, topic: str, app: str, address: str | None, count: int) -> None:
        """``count`` messages of ``app`` from ``address`` not stored on ``topic``."""
        if count > 0:
            self._row(topic, app, address)[BUCKETS] += count

    async def flush(self) -> None:
        """Write the buffered counts to Redis (kept for the next flush when it fails)."""
        if not self._pending:
            return
        pending, self._pending = self._pending, {}
        pipe = self._client.pipeline(transaction=False)
        hours: set[str] = set()
        days: set[str] = set()
        for (name, hour, host), row in pending.items():
            by_hour = counter_key(DIMENSION, name, hour)
            by_day = counter_key(DAY_DIMENSION, name, _day_of(hour))
            hours.add(by_hour)
            days.add(by_day)
            for b, value in enumerate(row):
                if value:
                    field = f"{host}|{FAILED if b == BUCKETS else b}"
                    pipe.hincrby(by_hour, field, value)
                    pipe.hincrby(by_day, field, value)
        for key in hours:
            pipe.expire(key, HOUR_RETENTION_S)
        for key in days:
            pipe.expire(key, DAY_RETENTION_S)
        try:
            await pipe.execute()
        except Exception:
            log.warning("produce latency flush failed; will retry", exc_info=True)
            for k, row in pending.items():
                cur = self._pending.setdefault(k, [0] * (BUCKETS + 1))
                for i, value in enumerate(row):
                    cur[i] += value
            self._flusher.retry()

    async def close(self) -> None:
        await self._flusher.close()
        await self.flush()

    async def read(
        self, producers: Sequence[tuple[str, str]], hours: int
    ) -> dict[tuple[str, str, str], ClientLatency]:
        """(topic, app, client host) → its appends in the last ``hours`` whole hours and
        the current one — beyond :data:`BY_HOURS`, the whole UTC days they touch; at most
        :data:`MAX_HOURS` — for each producer ``(topic, app)`` of ``producers`` (clients
        without any left out): pipelined, :data:`READ_BATCH` hashes per round trip."""
        await self.flush()
        hours = max(0, min(hours, MAX_HOURS))
        now = self._clock()
        touched = [_hour(now - h * 3600) for h in range(hours + 1)]
        if hours <= BY_HOURS:
            dimension, wanted = DIMENSION, touched
        else:
            dimension, wanted = DAY_DIMENSION, sorted({_day_of(h) for h in touched})
        reads = [(p, slot) for p in producers for slot in wanted]
        sums: dict[tuple[str, str, str], list[int]] = defaultdict(lambda: [0] * (BUCKETS + 1))
        for first in range(0, len(reads), READ_BATCH):
            batch = reads[first : first + READ_BATCH]
            pipe = self._client.pipeline(transaction=False)
            for (topic, app), slot in batch:
                pipe.hgetall(counter_key(dimension, f"{topic}:{app}", slot))
            for ((topic, app), _), data in zip(batch, await pipe.execute(), strict=True):
                for field, value in data.items():
                    host, _, slot = field.decode().rpartition("|")
                    index = BUCKETS if slot == FAILED else int(slot)
                    sums[(topic, app, host)][index] += int(value)
        return {key: ClientLatency(tuple(row[:BUCKETS]), row[BUCKETS]) for key, row in sums.items()}
