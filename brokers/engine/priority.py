"""Priority bands: how a PriorityBased topic keeps higher priorities ahead, for every protocol.

A topic whose delivery mode is ``PriorityBased`` keeps each priority band in a partition of
its own: partition 0 holds the highest band, the last partition the lowest (a queue made
with that mode gets :data:`PRIORITY_BANDS` partitions). An append that does not name a
partition goes to the band of its message's priority (higher numbers are more urgent, as
VibeMQ's ``low``..``critical`` = 0..3 and a JMQ4 priority byte); consumer groups lease
from the partitions in band order, so the highest band with messages waiting is served
first and each band stays in FIFO order. Pull consumers (JMQ4, HTTP-MQ) see the bands as
ordinary partitions. A bounded topic's max size counts every band together
(:mod:`.band_bound`).
"""

from __future__ import annotations

from brokers.engine.catalog import TopicInfo
from brokers.engine.record import Message, record_priority

PRIORITY_MODE = "PriorityBased"
PRIORITY_BANDS = 4
"""Partitions of a queue created PriorityBased: critical, high, normal, low."""


def is_prioritized(topic: TopicInfo) -> bool:
    """Whether ``topic`` keeps priority bands."""
    return topic.queue.delivery_mode == PRIORITY_MODE


def band_partition(topic: TopicInfo, priority: int) -> int:
    """The partition holding ``priority``'s band: ``bands - 1 - priority``, clamped to the
    topic's partitions (a priority above the top band joins it, below the last joins it)."""
    last = max(topic.partitions - 1, 0)
    return min(max(last - priority, 0), last)


def band_of(topic: TopicInfo, message: Message | bytes, offset: int = 0) -> int:
    """The band partition of ``message``: a Message's priority, or that of the JMQ4
    BrokerMessage record at ``offset`` of the bytes (its priority byte)."""
    if isinstance(message, Message):
        return band_partition(topic, message.priority)
    return band_partition(topic, record_priority(message, offset))
