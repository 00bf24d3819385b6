"""Laying out a topic's partition groups and choosing their leader brokers.

Partitions are split into contiguous groups of nearly equal size; leaders are spread over
the cluster's writable brokers in proportion to their weights (smooth weighted
round-robin, so two brokers of equal weight alternate).
"""

from __future__ import annotations

from collections.abc import Sequence

from django.core.exceptions import ValidationError
from django.db import transaction

from brokers.models import Broker, PartitionGroup, Topic


def split_partitions(partitions: int, groups: int) -> list[list[int]]:
    """Split ``range(partitions)`` into ``groups`` contiguous, nearly equal runs."""
    if not 1 <= groups <= partitions:
        raise ValueError("need 1 ≤ groups ≤ partitions")
    base, extra = divmod(partitions, groups)
    runs, start = [], 0
    for g in range(groups):
        size = base + (1 if g < extra else 0)
        runs.append(list(range(start, start + size)))
        start += size
    return runs


def spread_leaders(brokers: Sequence[Broker], count: int) -> list[Broker]:
    """Pick ``count`` leaders from ``brokers`` by smooth weighted round-robin."""
    weighted = [b for b in brokers if b.weight > 0] or list(brokers)
    if not weighted:
        raise ValueError("no broker to lead")
    current = {b.id: 0 for b in weighted}
    total = sum(max(b.weight, 1) for b in weighted)
    chosen = []
    for _ in range(count):
        for b in weighted:
            current[b.id] += max(b.weight, 1)
        best = max(weighted, key=lambda b: (current[b.id], -b.id))
        current[best.id] -= total
        chosen.append(best)
    return chosen


def default_group_count(topic: Topic) -> int:
    """One partition group per writable broker of the topic's cluster, at most one per partition."""
    writable = Broker.objects.filter(cluster_id=topic.cluster_id, writable=True).count()
    return max(1, min(writable, topic.partitions))


@transaction.atomic
def create_partition_groups(topic: Topic, groups: int | None = None) -> list[PartitionGroup]:
    """Create ``groups`` partition groups for a new topic with leaders on writable brokers.

    ``groups`` defaults to :func:`default_group_count`.
    """
    if groups is None:
        groups = default_group_count(topic)
    if topic.groups.exists():
        raise ValidationError("The topic already has partition groups.")
    if not 1 <= groups <= topic.partitions:
        raise ValidationError(
            {"partition_groups": f"Must be between 1 and the partition count ({topic.partitions})."}
        )
    writable = list(
        Broker.objects.filter(cluster_id=topic.cluster_id, writable=True).order_by("id")
    )
    if not writable:
        raise ValidationError({"cluster": "The cluster has no writable broker to lead partitions."})
    leaders = spread_leaders(writable, groups)
    return [
        PartitionGroup.objects.create(topic=topic, group_id=g, leader=leader, partitions=run)
        for g, (run, leader) in enumerate(
            zip(split_partitions(topic.partitions, groups), leaders, strict=True)
        )
    ]
