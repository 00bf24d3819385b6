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


class Inflight:
    """Unacknowledged deliveries of one connection."""

    def __init__(self) -> None:
        self._by_id: dict[str, deque[Tracked]] = {}
        self.per_queue: Counter[str] = Counter()

    def __len__(self) -> int:
        return sum(self.per_queue.values())

    def add(self, item: Tracked) -> None:
        """Track a delivery just written."""
        self._by_id.setdefault(item.message_id, deque()).append(item)
        self.per_queue[item.queue] += 1

    def _remove(self, item: Tracked) -> None:
        item.settled = True
        items = self._by_id.get(item.message_id)
        if items is not None:
            with contextlib.suppress(ValueError):
                items.remove(item)
            if not items:
                del self._by_id[item.message_id]
        self.per_queue[item.queue] -= 1
        if self.per_queue[item.queue] <= 0:
            del self.per_queue[item.queue]

    def settle(self, message_id: str, now_ms: int) -> Tracked | None:
        """Remove and return the oldest live delivery of ``message_id`` (None if unknown).

        An engine lease past its deadline is no longer this connection's: the engine
        retries it, so a late ack must not settle someone else's redelivery.
        """
        for item in list(self._by_id.get(message_id, ())):
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
        return [item for items in self._by_id.values() for item in items]

    def of_queue(self, queue: str) -> list[Tracked]:
        """Tracked deliveries of one queue."""
        return [item for item in self.items() if item.queue == queue]
