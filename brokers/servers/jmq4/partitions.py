"""Leadership and partition choice as JMQ4 sees them (spec §6.8, §6.6).

A JMQ4 broker serves only the partitions whose group it leads; a request for another
broker's partition gets 187 (fetch) or 188 (produce) so the client re-reads the metadata.
"""

from __future__ import annotations

import random

from brokers.engine import TopicInfo, java_hash


def leads(topic: TopicInfo, partition: int, broker_id: int) -> bool:
    """True when ``broker_id`` leads ``partition`` (a topic without groups is led everywhere)."""
    if not topic.groups:
        return True
    return topic.leader_of(partition) == broker_id


def local_partitions(topic: TopicInfo, broker_id: int) -> tuple[int, ...]:
    """The partitions of ``topic`` this broker leads."""
    if not topic.groups:
        return tuple(range(topic.partitions))
    return topic.partitions_led_by(broker_id)


def choose_local(
    local: tuple[int, ...], *, ordered: bool, business_id: str, rng: random.Random
) -> int:
    """Spec §6.8: ordered messages hash their businessId (or take the first partition);
    others take a random local partition."""
    if ordered:
        return local[abs(java_hash(business_id)) % len(local)] if business_id else local[0]
    return local[rng.randrange(len(local))]
