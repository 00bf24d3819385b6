"""One connection's unacknowledged deliveries, keyed by message id (vibemq.md §7).

An ack names a message id; ids need not be unique, so each id maps to the connection's
deliveries of it in delivery order and an ack settles the oldest live one. Every delivery
is an engine lease of a consumer group — the subscriber's app, and for a fan-out
subscriber its member id — so retries, TTL and the DLQ are the engine's.
"""

from __future__ import annotations

import contextlib
from collections import Counter, deque
from dataclasses import dataclass, field

from brokers.engine import Delivery


@dataclass(slots=True)
class Tracked:
    """One unacknowledged delivery."""

    queue: str
    message_id: str
    delivery: Delivery
    deadline_ms: int
    app: str = ""
    """The consumer group the lease is of."""
    member: str | None = None
    """The fan-out member id (None: a competing consumer of the group)."""
    settled: bool = field(default=False)
    attempts: int = 0
    """Deliveries so far, as its last ``deliver`` said (0: the lease's own count)."""
    retry_at: int | None = None
    """A failed attempt kept for this connection (§7): when it is delivered again."""


class Inflight:
    """Unacknowledged deliveries of one connection.

    Ids are nearly always unique, so the first delivery of an id is kept as it is and only
    later ones of the same id wait in a queue behind it (no container per delivery).
    """

    def __init__(self) -> None:
        self._first: dict[str, Tracked] = {}
        self._later: dict[str, deque[Tracked]] = {}
        self.per_queue: Counter[str] = Counter()

    def __len__(self) -> int:
        return sum(self.per_queue.values())

    def add(self, item: Tracked) -> None:
        """Track a delivery just written."""
        if item.message_id in self._first:
            self._later.setdefault(item.message_id, deque()).append(item)
        else:
            self._first[item.message_id] = item
        self.per_queue[item.queue] += 1

    def _remove(self, item: Tracked) -> None:
        item.settled = True
        message_id = item.message_id
        later = self._later.get(message_id)
        if self._first.get(message_id) is item:
            if later:
                self._first[message_id] = later.popleft()
            else:
                del self._first[message_id]
        elif later is not None:
            with contextlib.suppress(ValueError):
                later.remove(item)
        if later is not None and not later:
            del self._later[message_id]
        count = self.per_queue[item.queue] - 1
        if count > 0:
            self.per_queue[item.queue] = count
        else:
            del self.per_queue[item.queue]

    def settle(self, message_id: str, now_ms: int) -> Tracked | None:
        """Remove and return the oldest live delivery of ``message_id`` (None if unknown).

        An engine lease past its deadline is no longer this connection's: the engine
        retries it, so a late ack must not settle someone else's redelivery.
        """
        first = self._first.get(message_id)
        if first is None:
            return None
        if first.deadline_ms > now_ms:
            self._remove(first)
            return first
        for item in list(self._later.get(message_id, ())):
            if item.deadline_ms > now_ms:
                self._remove(item)
                return item
        return None

    def forget(self, item: Tracked) -> None:
        """Stop tracking ``item`` (an expired lease: the engine delivers it again)."""
        if not item.settled:
            self._remove(item)

    def items(self) -> list[Tracked]:
        """Every tracked delivery."""
        return [*self._first.values(), *(item for items in self._later.values() for item in items)]

    def of_queue(self, queue: str) -> list[Tracked]:
        """Tracked deliveries of one queue."""
        return [item for item in self.items() if item.queue == queue]
