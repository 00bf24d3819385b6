"""How long this process's store writes took over the last minute: what a process
reports about itself (``store_writes`` in its report) and what the store-slow alert
reads (the reference console's "broker store slow": max over 500 ms or p99 over 400 ms).

Every write through :class:`~brokers.engine.redisio.Durability` — appends over every
protocol, bounded appends, dead letters — adds its round trip as the engine saw it: the
store's own time, the network and this process's turn to read the reply. Counts go into
fixed buckets of 10-second slots, six of them kept, so a summary covers the last minute
whatever the reporting period; adding one is a clock read, a bisect and an increment.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Callable, Sequence

BOUNDS_MS = (1, 2, 5, 10, 20, 50, 100, 200, 300, 400, 500, 750, 1_000, 2_000, 5_000)
"""Upper bounds (ms) of the buckets; one more bucket holds what is slower."""
SLOT_S = 10
SLOTS = 6


class LatencyWindow:
    """Latencies of the last ``SLOTS`` × ``SLOT_S`` seconds, on ``clock`` (seconds; the
    default, ``perf_counter``, is what callers time writes with: they pass the end)."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self._clock = clock
        self._slots: list[list[int]] = [[0] * (len(BOUNDS_MS) + 1) for _ in range(SLOTS)]
        self._max: list[float] = [0.0] * SLOTS
        self._epoch: list[int] = [-1] * SLOTS
        self._current = -1  # the epoch (clock // SLOT_S) writes count in now
        self._counts = self._slots[0]
        self._top = 0.0

    def _rotate(self, epoch: int) -> None:
        """Move to ``epoch``'s slot, started again if it held an older one."""
        if self._current >= 0:
            self._max[self._current % SLOTS] = self._top
        i = epoch % SLOTS
        if self._epoch[i] != epoch:
            self._epoch[i] = epoch
            self._slots[i] = [0] * (len(BOUNDS_MS) + 1)
            self._max[i] = 0.0
        self._current, self._counts, self._top = epoch, self._slots[i], self._max[i]

    def add(self, seconds: float, now: float | None = None) -> None:
        """Count one write that took ``seconds`` and ended at ``now`` (default: the
        clock's now)."""
        epoch = int((self._clock() if now is None else now) // SLOT_S)
        if epoch != self._current:
            self._rotate(epoch)
        ms = seconds * 1000.0
        self._counts[bisect_left(BOUNDS_MS, ms)] += 1
        if ms > self._top:
            self._top = ms

    def summary(self) -> dict[str, float | int]:
        """``count``, ``p99_ms`` (the bound of the bucket holding the 99th percentile; the
        slowest write's time when that is lower, or when it is in the last bucket) and
        ``max_ms`` of the writes of the last minute."""
        now = int(self._clock() // SLOT_S)
        if now != self._current:
            self._rotate(now)
        self._max[now % SLOTS] = self._top
        counts = [0] * (len(BOUNDS_MS) + 1)
        top = 0.0
        for i in range(SLOTS):
            if now - self._epoch[i] < SLOTS:
                counts = [a + b for a, b in zip(counts, self._slots[i], strict=True)]
                top = max(top, self._max[i])
        total = sum(counts)
        p99 = 0.0
        b = bucket_of(counts, 0.99)
        if b is not None:
            p99 = min(float(BOUNDS_MS[b]) if b < len(BOUNDS_MS) else top, top)
        return {"count": total, "p99_ms": round(p99, 1), "max_ms": round(top, 1)}


def bucket_of(counts: Sequence[int], share: float) -> int | None:
    """The index of the bucket holding the ``share`` percentile (0.99: p99) of
    ``counts`` (one count per bucket of :data:`BOUNDS_MS`, then the slower ones); None
    when they are all 0."""
    total = sum(counts)
    if not total:
        return None
    rank, seen = total * share, 0
    for b, n in enumerate(counts):
        seen += n
        if seen >= rank:
            return b
    return len(counts) - 1
