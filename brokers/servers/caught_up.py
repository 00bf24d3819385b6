"""Consumers caught up with their group: whom a dispatcher need not lease for again yet.

Shared by the dispatchers that lease on their consumers' behalf (VibeMQ queue dispatchers,
zbus queue pumps). A lease that left nothing servable — it found nothing, or the engine
said nothing more is there (:attr:`brokers.engine.Lease.more`) — marks its consumer with
the engine time its lease named something may be due (a retry after its backoff, another
lessee's expiry; inf: nothing known). Until then an ack or a new consume does not make
the dispatcher lease for it again: that lease would find nothing. What makes messages
servable otherwise is announced on the topic's notification (appends, releases, offset
resets), which clears every mark (:meth:`CaughtUp.clear`); a timer run out without one
(:meth:`CaughtUp.tick`) clears them only when the catalog changed (a consumer resumed, a
policy granted) or every ``recheck_every`` ticks, as a safety net — clearing at every tick
cost each idle consumer an empty lease per tick, for ever.
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from typing import Generic, TypeVar

from brokers.engine import Lease

K = TypeVar("K", bound=Hashable)


class CaughtUp(Generic[K]):
    """The caught-up marks of one dispatcher's consumers."""

    def __init__(self, catalog_version: int, recheck_every: int) -> None:
        self._until: dict[K, float] = {}
        self._version = catalog_version
        self._recheck_every = recheck_every
        self._quiet_ticks = 0

    def record(self, key: K, lease: Lease) -> None:
        """What ``key``'s lease said: more servable now (no mark), or not before its hint."""
        if lease.more:
            self._until.pop(key, None)
        else:
            self._until[key] = lease.retry_after_ms or math.inf

    def holds(self, key: K, now_ms: int) -> bool:
        """Whether ``key`` is caught up at engine time ``now_ms`` (not to be leased for)."""
        return self._until.get(key, 0) > now_ms

    def next_due(self) -> float:
        """The earliest engine time a mark names (inf: none)."""
        return min(self._until.values(), default=math.inf)

    def clear(self) -> None:
        """The topic was notified: every consumer looks again."""
        self._until.clear()

    def tick(self, catalog_version: int) -> None:
        """The timer ran out without a notification: clear the marks on a catalog change
        or every ``recheck_every``-th tick."""
        self._quiet_ticks += 1
        if catalog_version != self._version or self._quiet_ticks >= self._recheck_every:
            self._version, self._quiet_ticks = catalog_version, 0
            self._until.clear()
