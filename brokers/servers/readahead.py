"""The read-ahead budget of one broker process, and each consumer's pace.

zbus MQ pumps and VibeMQ dispatchers lease more than their consumers have room for and
keep the rest in memory for the next room: a freed slot is then filled without a Redis
round trip. Each consumer keeps at most a batch, but a process serving thousands of
consumers would hold thousands of batches of records nobody asked for yet. The budget
caps the bytes they all keep together: within it, read-ahead works as before; past it, a
consumer leases only what it has room for and what was leased beyond that goes back to
its group at once (unread, so not counted as a delivery).

One budget is shared by every server of a ``runbroker`` process; a server started on its
own gets its own.

Within the budget, a consumer reads ahead what it took per hold since its previous lease
(:class:`Paces`): a slow one (a message a second) would otherwise lease a batch each time,
only for all but one of it to go back unread a hold later — two scripts reading a batch
each, per message, and the batch counted as consumed traffic.
"""

from __future__ import annotations

import math
import operator
import os
from collections.abc import Iterable
from typing import Generic, TypeVar

from brokers.engine import Delivery

DEFAULT_MB = 64
"""The default budget (``BROKER_READ_AHEAD_MB``)."""
PER_DELIVERY = 200
"""Bytes a kept delivery costs besides its record (the delivery, its tuple, a deque slot)."""
PACE_KEEP = 256
"""Paces a dispatcher keeps before it forgets those of consumers idle for ``PACE_IDLE``."""
PACE_IDLE = 60.0
"""Seconds after its last lease a consumer's pace may be forgotten."""

K = TypeVar("K")


_record = operator.attrgetter("record")


def footprint(deliveries: Iterable[Delivery]) -> int:
    """The bytes ``deliveries`` take while kept (summed in C: it runs twice per delivery
    read ahead)."""
    kept = deliveries if isinstance(deliveries, list | tuple) else list(deliveries)
    return sum(map(len, map(_record, kept))) + PER_DELIVERY * len(kept)


class ReadAheadBudget:
    """Bytes of read-ahead a process keeps (``held``), against ``limit``."""

    def __init__(self, limit_bytes: int) -> None:
        if limit_bytes < 0:
            raise ValueError("a read-ahead budget cannot be negative")
        self.limit = limit_bytes
        self.held = 0
        self.peak = 0
        """The most ever held (what a capacity plan reads)."""
        self.refused = 0
        """Deliveries sent back at once because the budget was spent."""

    @classmethod
    def from_environment(cls) -> ReadAheadBudget:
        """``BROKER_READ_AHEAD_MB`` megabytes (default 64; 0 turns read-ahead off)."""
        raw = os.environ.get("BROKER_READ_AHEAD_MB", "").strip()
        try:
            megabytes = float(raw) if raw else DEFAULT_MB
        except ValueError:
            megabytes = math.nan
        if not (math.isfinite(megabytes) and megabytes >= 0):
            raise ValueError(f"BROKER_READ_AHEAD_MB must be a number >= 0, not {raw!r}")
        return cls(int(megabytes * 1024 * 1024))

    @property
    def open(self) -> bool:
        """Whether a consumer may lease beyond its room now."""
        return self.held < self.limit

    def keep(self, deliveries: list[Delivery]) -> int:
        """Take as many of ``deliveries`` (in order) as fit; how many. What fits is held
        until :meth:`release`."""
        room = self.limit - self.held
        size = footprint(deliveries)
        if size <= room:
            fit = len(deliveries)
        else:
            fit = size = 0
            for d in deliveries:
                cost = len(d.record) + PER_DELIVERY
                if size + cost > room:
                    break
                size += cost
                fit += 1
            self.refused += len(deliveries) - fit
        self.held += size
        if self.held > self.peak:
            self.peak = self.held
        return fit

    def release(self, deliveries: Iterable[Delivery]) -> None:
        """Kept deliveries were dealt or went back."""
        self.held = max(0, self.held - footprint(deliveries))


class Pace:
    """What one consumer took since its last lease (``dealt`` since ``since``, monotonic
    seconds): how much read-ahead it would use before it goes back."""

    __slots__ = ("dealt", "since")

    def __init__(self, now: float) -> None:
        self.since = now
        self.dealt = 0

    def per(self, seconds: float, now: float) -> int:
        """What it takes in ``seconds`` at this pace (rounded up)."""
        return math.ceil(self.dealt * seconds / max(now - self.since, 1e-3))


class Paces(Generic[K]):
    """The pace of each consumer of one MQ or queue: what it took since its last lease
    that found messages. Past ``PACE_KEEP`` consumers, those idle for ``PACE_IDLE`` seconds
    are forgotten (consumers that left do not stay forever)."""

    def __init__(self) -> None:
        self._by_key: dict[K, Pace] = {}

    def leased(self, key: K, now: float) -> None:
        """``key`` leased messages at ``now``: its pace counts from here."""
        paces = self._by_key
        paces[key] = Pace(now)
        if len(paces) > PACE_KEEP:
            self._by_key = {k: p for k, p in paces.items() if p.since > now - PACE_IDLE}

    def took(self, key: K, n: int) -> None:
        """``key``'s sessions or subscribers were handed ``n`` more."""
        pace = self._by_key.get(key)
        if pace is not None:
            pace.dealt += n

    def per(self, key: K, seconds: float, now: float) -> int | None:
        """What ``key`` takes in ``seconds`` at its pace; None while it is not known."""
        pace = self._by_key.get(key)
        return None if pace is None else pace.per(seconds, now)
