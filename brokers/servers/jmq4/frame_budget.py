"""What one FETCH response may carry: the messages of a response frame stay under the
receiver's frame maximum (jmq4.md §9: default 16 MiB; a frame above it is malformed and
closes the connection).

A partition holds messages of up to the engine's body limit, whatever protocol stored
them (JMQ4 3 MiB, HTTP-MQ 4 MiB, zbus 16 MiB). The engine reads at most
:data:`~brokers.engine.read.PULL_READ_BYTES` (16 MiB) of them per fetch, but that is the
frame's whole maximum, with no room for the rest of the frame, and one response carries
the fetches of several topics (or partitions): over the maximum, the client would drop the
connection, its lock lapse, and the next fetch read the same batch again — a partition no
consumer gets past. A locked fetch asks the engine to read no more than the room left
(:meth:`FrameBudget.room`), so what it locks, counts as consumed and charges to the rate
limit is what it sends. A response then takes messages in order while they fit (what an
unlocked read or a retry read past the room); the first message of a response always goes.
What a locked fetch read but does not send is read again once the client acks what it got
(the ack releases the lock, §6.4) or once the lock lapses.

One message can be larger than a whole frame (a zbus body of up to 16 MiB against a
16 MiB frame, or a frame maximum set lower): :meth:`FrameBudget.too_large`. It can never
be sent over JMQ4, so the fetch fails it instead (the group's retries and dead letters
take it; another protocol's consumer of the group may get it) and goes on past it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

from brokers.engine import Delivery

MARGIN = 64 * 1024
"""Bytes of a frame kept for what is not a record: the header, topic names, codes and
each message's length prefix."""
PER_MESSAGE = 16
"""Wire bytes of a message besides its record (generous)."""
UNSAID_COUNT = 1024
"""Messages :meth:`FrameBudget.room` allows for when the fetch names no count."""

D = TypeVar("D", bound=Delivery)


class FrameBudget:
    """The room left for records in one response frame."""

    __slots__ = ("capacity", "left", "sent")

    def __init__(self, max_frame_size: int) -> None:
        self.capacity = self.left = max(0, max_frame_size - MARGIN)
        self.sent = 0

    def too_large(self, delivery: Delivery) -> bool:
        """Whether ``delivery`` alone is over what any response frame can carry."""
        return len(delivery.record) + PER_MESSAGE > self.capacity

    def room(self, count: int) -> int:
        """Bytes of records a read of up to ``count`` messages (≤ 0: the policy's batch)
        may take and still fit; at least 1 (the engine reads one record whatever its
        size, as :meth:`take` sends one)."""
        n = count if count > 0 else UNSAID_COUNT
        return max(1, self.left - PER_MESSAGE * n)

    def take(self, deliveries: Sequence[D]) -> tuple[list[D], list[D]]:
        """(the deliveries that fit, in order; the rest) — at least one when this
        response has sent nothing yet."""
        kept: list[D] = []
        for i, d in enumerate(deliveries):
            size = len(d.record) + PER_MESSAGE
            if size > self.left and self.sent:
                return kept, list(deliveries[i:])
            self.left -= size
            self.sent += 1
            kept.append(d)
        return kept, []
