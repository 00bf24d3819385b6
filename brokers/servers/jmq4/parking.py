"""How many FETCH_TOPIC_MESSAGE long polls may wait at once (jmq4.md §6.2): per (topic,
app) at most as many as the broker leads partitions of the topic, and a total; beyond
either, the fetch looks once and answers at once (empty when nothing is there), as
JoyQueue does. The count is this process's: a broker run as P processes
(``runbroker --processes P``) parks up to P times as many."""

from __future__ import annotations

from collections import Counter

MAX_PARKED = 10_000
"""Long polls one process lets wait at once, whatever their topics."""


class LongPollSlots:
    """The long polls waiting now, by (topic, app, broadcast client or None): a broadcast
    client has progress of its own, so its polls compete with no other client's."""

    def __init__(self, total: int = MAX_PARKED) -> None:
        self.total = total
        self._waiting: Counter[tuple[str, str, str | None]] = Counter()
        self._all = 0

    def take(self, topic: str, app: str, client_id: str | None, limit: int) -> bool:
        """Whether a long poll of ``app`` (its broadcast client ``client_id``) on ``topic``
        may wait (then it holds a slot until :meth:`give_back`); ``limit``: the topic's
        partitions this broker leads."""
        key = (topic, app, client_id)
        if self._all >= self.total or self._waiting[key] >= limit:
            return False
        self._waiting[key] += 1
        self._all += 1
        return True

    def give_back(self, topic: str, app: str, client_id: str | None) -> None:
        """The long poll that held a slot is answered (or cut short)."""
        key = (topic, app, client_id)
        left = self._waiting[key] - 1
        if left > 0:
            self._waiting[key] = left
        else:
            del self._waiting[key]
        self._all -= 1

    def waiting(self, topic: str, app: str, client_id: str | None = None) -> int:
        """Long polls of ``app`` (its client ``client_id``) on ``topic`` holding a slot now."""
        return self._waiting[(topic, app, client_id)]
