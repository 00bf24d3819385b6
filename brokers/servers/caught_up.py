"""Consumers caught up with their group: whom a dispatcher need not lease for again yet.

Shared by the dispatchers that lease on their consumers' behalf (VibeMQ queue dispatchers,
zbus queue pumps). A lease that left nothing servable — it found nothing, or the engine
said nothing more is there (:attr:`brokers.engine.Lease.more`) — marks its consumer with
the engine time its lease named something may be due (a retry after its backoff, another
lessee's expiry; inf: nothing known). Until then an ack or a new consume does not make
the dispatcher lease for it again: that lease would find nothing. What makes messages
servable otherwise is announced on the topic's notification (appends, releases, offset
resets), which clears every mark (:meth:`CaughtUp.clear`), or is a catalog change that
concerns the dispatcher's consumers (a consumer resumed, a policy granted:
:meth:`CaughtUp.catalog`, given what :meth:`brokers.engine.Engine.consumer_terms` says of
them — a change to one queue of a fleet of 5,000 made every dispatcher lease again). So a
dispatcher whose consumers are all caught up sleeps until a notification, a catalog
change or its earliest hint (:meth:`CaughtUp.wait_s`) — not on a timer: 5,000 idle
subscribed queues woke their dispatchers 5,000 times a second. As a safety net the marks
are also cleared every ``recheck_s`` seconds, each dispatcher's first recheck at a random
point of the period, so a fleet's dispatchers started together do not lease all at once.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Hashable, Iterable
from typing import Generic, TypeVar

from brokers.engine import Engine, Lease

K = TypeVar("K", bound=Hashable)

RECHECK_S = 120.0
"""Seconds between safety-net rechecks of caught-up consumers. What makes messages
servable is announced, and a lost notification link wakes every waiter when it is
replaced, so the net guards only against an announcement lost otherwise; each recheck
costs every idle consumer a lease (5,000 consumers at 30 s: 167 leases/s, most of an idle
broker's CPU)."""


class CaughtUp(Generic[K]):
    """The caught-up marks of one dispatcher's consumers."""

    def __init__(
        self,
        recheck_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``recheck_s``: the safety net's period (default :data:`RECHECK_S`)."""
        recheck_s = RECHECK_S if recheck_s is None else recheck_s
        self._until: dict[K, float] = {}
        self._terms: object = None
        self._recheck_s = recheck_s
        self._clock = clock
        self._recheck_at = clock() + recheck_s * random.random()

    def record(self, key: K, lease: Lease) -> None:
        """What ``key``'s lease said: more servable now (no mark), or not before its hint."""
        if lease.more:
            self._until.pop(key, None)
        else:
            self._until[key] = lease.retry_after_ms or math.inf

    def forget(self, key: K) -> None:
        """``key`` is gone (its consumer left): no mark of it is kept."""
        self._until.pop(key, None)

    def holds(self, key: K, now_ms: int) -> bool:
        """Whether ``key`` is caught up at engine time ``now_ms`` (not to be leased for)."""
        return self._until.get(key, 0) > now_ms

    def settled(self, now_ms: int) -> set[str]:
        """The groups (apps: the first part of a key) of which a consumer is caught up at
        engine time ``now_ms``: its last lease found nothing more in the group."""
        return {key[0] for key, until in self._until.items() if until > now_ms}  # type: ignore[index]

    def next_due(self) -> float:
        """The earliest engine time a mark names (inf: none)."""
        return min(self._until.values(), default=math.inf)

    def clear(self) -> None:
        """The topic was notified: every consumer looks again."""
        self._until.clear()

    def catalog(self, engine: Engine, topic: str, apps: Iterable[str]) -> bool:
        """Read what the catalog now says of the consumers — ``apps`` consuming ``topic``
        (:meth:`~brokers.engine.Engine.consumer_terms`) — and clear the marks if it differs
        from the last call's; whether it did (the first call only records it)."""
        terms = tuple(engine.consumer_terms(topic, app) for app in sorted(set(apps)))
        if terms == self._terms:
            return False
        first, self._terms = self._terms is None, terms
        if first:
            return False
        self._until.clear()
        return True

    def wait_s(self, now_ms: int, longest: float) -> float:
        """How long the dispatcher may sleep without a notification: at most ``longest``
        seconds, until the earliest hint (engine time ``now_ms``) or the safety net's
        recheck (at least 10 ms: a hint just passed is served by the next round)."""
        wait = min(longest, self._recheck_at - self._clock())
        if self._until:
            wait = min(wait, (self.next_due() - now_ms) / 1000)
        return max(0.01, wait)

    def recheck(self) -> None:
        """A sleep ran out: clear the marks when the safety net's recheck is due."""
        now = self._clock()
        if now >= self._recheck_at:
            self._recheck_at = now + self._recheck_s
            self._until.clear()
