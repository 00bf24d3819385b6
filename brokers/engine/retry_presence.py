"""Whether a consumer group's retry store may hold something due, known without asking
Redis on every lease or fetch.

A group's retries (copies of failed messages, dead letters resent from the console) wait
in its retry store (:mod:`brokers.engine.retry`), which every consumer of the group reads
besides its partitions: JMQ4 and HTTP-MQ fetches, zbus sessions and VibeMQ subscribers.
Most groups never have a retry, so a look that found the store empty is remembered with
the topic's notification stamp (:meth:`Notifier.stamp`): every add or resend publishes a
notification naming no partition, which changes the stamp, so while it holds the store
need not be asked again — until the earliest retry it did hold (backing off, or leased)
is due. Where the process does not receive the topic's notifications (no stamp), it asks
again at most every :data:`RECHECK_MS`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from brokers.engine.notify import Notifier
from brokers.engine.read import PULL_READ_BYTES
from brokers.engine.retry import RetryPolicy, RetryStore

RECHECK_MS = 1_000
"""How stale "nothing due" may be where no notification would tell of a new retry."""
ASK = -1
""":meth:`RetryPresence.look`: the store must be asked."""
_NEVER = 2**63


class RetryPresence:
    """What the last look at each (topic, owner) retry store found (see the module text;
    the owner is the group's app, or ``app#clientId`` for a broadcast client's own)."""

    __slots__ = ("_empty", "_notifier", "_now_ms")

    def __init__(self, notifier: Notifier, now_ms: Callable[[], int]) -> None:
        self._notifier = notifier
        self._now_ms = now_ms
        # (topic, app) -> (notifier stamp then, engine ms from which to look again, the
        # earliest retry's due time then, 0 if none)
        self._empty: dict[tuple[str, str], tuple[tuple[int, int] | None, int, int]] = {}

    def look(self, topic: str, app: str) -> int:
        """:data:`ASK` when the store may hold a retry due now; else when its earliest
        retry is due, as the last look saw it (0: it held none). Runs on every lease and
        fetch: a dict lookup, and the clock only when a time was set."""
        known = self._empty.get((topic, app))
        if known is None:
            return ASK
        stamp, until, due = known
        if stamp is not None and self._notifier.stamp(topic) != stamp:
            return ASK
        if until != _NEVER and self._now_ms() >= until:
            return ASK
        return due

    def forget(self, topic: str, app: str) -> None:
        """The store changed (a retry added, resent or made due by this process): ask it
        at the next look."""
        self._empty.pop((topic, app), None)

    def learned(self, topic: str, app: str, *, found: bool, next_due: int | None) -> None:
        """Remember a look: whether it found (and leased) retries; when none, the due
        time of the earliest one left (None: the store is empty)."""
        key = (topic, app)
        if found:
            self._empty.pop(key, None)
            return
        stamp = self._notifier.stamp(topic)
        until = _NEVER if next_due is None else next_due
        if stamp is None:  # no notification would tell: look again within RECHECK_MS
            until = min(until, self._now_ms() + RECHECK_MS)
        self._empty[key] = (stamp, until, next_due or 0)


async def lease_first_due(
    presence: RetryPresence,
    stores: Sequence[RetryStore],
    topic: str,
    *,
    now_ms: int,
    lease_ms: int,
    max_items: int,
    policy: RetryPolicy,
    holder: str | None,
    max_bytes: int = PULL_READ_BYTES,
) -> tuple[list[tuple[int, int, int, int, int, bytes]], int | None]:
    """Lease the due retries of the first of ``stores`` (:func:`~.retry.retry_stores`)
    that has some, asking Redis only of those ``presence`` says may hold one due — on
    the common path this awaits nothing: (the leased rows of
    :meth:`RetryStore.lease_or_next_due`, or none and the earliest due time of a retry
    left in any of them, None when they hold none)."""
    next_due: int | None = None
    for store in stores:
        known = presence.look(topic, store.owner)
        if known != ASK:  # nothing due, and no retry was added since the last look
            due = known or None
        else:
            leased, due = await store.lease_or_next_due(
                now_ms=now_ms,
                lease_ms=lease_ms,
                max_items=max_items,
                policy=policy,
                holder=holder,
                max_bytes=max_bytes,
            )
            presence.learned(topic, store.owner, found=bool(leased), next_due=due)
            if leased:
                return leased, None
        if due is not None and (next_due is None or due < next_due):
            next_due = due
    return [], next_due
