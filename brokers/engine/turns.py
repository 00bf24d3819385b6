"""Producers' turns over a topic's partitions: smooth weighted round-robin.

When a produce names no partition (and the topic is neither sequential nor prioritized),
its messages go to the writable partitions in turn, each partition as often as its
broker's weight (or the producer policy's weight for that broker) says: with equal
weights that is plain round-robin, so n produces to n partitions land one on each, as
HTTP-MQ's spec (§2.1) and a user spreading load expect. Smooth weighted round-robin (as
nginx does) interleaves the heavier partitions rather than sending them runs.

One :class:`PartitionTurns` per engine (so per process) keeps the turn of each
(topic, producer app), and the weighted partitions it turns over for as long as the
catalog snapshot is the same (working them out is most of a choice's cost); a change in
the writable partitions or their weights starts that turn anew. Each new turn starts at
a random partition, so processes started together do not all begin with partition 0. A
turn is a few integers per (topic, app) a process produced to.
"""

from __future__ import annotations

import random
import weakref
from collections.abc import Callable
from typing import Any


class _Turn:
    __slots__ = ("current", "pairs", "snapshot", "total")

    def __init__(self, pairs: list[tuple[int, int]], rng: random.Random) -> None:
        self.snapshot: weakref.ref[Any] | None = None
        """The catalog snapshot ``pairs`` were worked out from (weakly: an old catalog is
        not kept alive by a topic produced to no more)."""
        start = rng.randrange(len(pairs))
        self.pairs = pairs
        # ties go to the earliest; one extra point makes `start` the first pick (the
        # sums stay one over, so every `total` picks still hold each weight exactly)
        self.current = [0] * len(pairs)
        self.current[start] = 1 if len(pairs) > 1 else 0
        self.total = sum(w for _, w in pairs)


class PartitionTurns:
    """The next partition of each (topic, app), by smooth weighted round-robin."""

    def __init__(self, rng: random.Random | None = None) -> None:
        self._rng = rng or random.Random()
        self._turns: dict[tuple[str, str], _Turn] = {}

    def next(
        self,
        topic: str,
        app: str,
        snapshot: Any,
        weighted: Callable[[], list[tuple[int, int]]],
    ) -> int:
        """The partition whose turn it is; -1 when none is writable. ``weighted()`` gives
        (partition, weight > 0) in partition order; it is asked again only when the
        catalog ``snapshot`` changed."""
        key = (topic, app)
        turn = self._turns.get(key)
        if turn is None or turn.snapshot is None or turn.snapshot() is not snapshot:
            pairs = weighted()
            if not pairs:
                return -1
            if turn is None or turn.pairs != pairs:
                turn = self._turns[key] = _Turn(pairs, self._rng)
            turn.snapshot = weakref.ref(snapshot)
        pairs, current = turn.pairs, turn.current
        best = 0
        for i, (_, weight) in enumerate(pairs):
            current[i] += weight
            if current[i] > current[best]:
                best = i
        current[best] -= turn.total
        return pairs[best][0]
