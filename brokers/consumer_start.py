"""Pin where new clustering consumers start, at the moment they are created (approved).

http-mq.md §13.3: with ``start_position = latest`` a consumer starts at each partition's
end *as of its registration*, so nothing produced between approval and the first fetch is
skipped (mq-proxy took the end at the first lock and lost those messages). Broadcast
clients start at their own first access instead, so they are not pinned here.

Consumers are pinned in batches: every consumer created in one transaction joins ONE ``on_commit`` callback, which reads just those policies and
their topics in one query, builds a catalog snapshot of only them
(:func:`registration_snapshot`) and pins every partition of every one through
``Engine.register_consumers`` on one Redis connection in one round trip. Creating N
consumers therefore costs O(N), never a rebuild of the whole catalog per consumer.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import redis

from brokers.catalog_loader import consumer_info
from brokers.commit_batch import add_to_commit_batch
from brokers.engine import (
    CatalogSnapshot,
    EngineError,
    QueueSettings,
    TopicInfo,
)
from brokers.engine_run import run_on_engine
from brokers.models import ConsumerPolicy, Topic

log = logging.getLogger(__name__)

Pinned = dict[tuple[str, str], dict[int, int]]
"""``(topic, app)`` → ``{partition: ack index}`` of the consumers a batch pinned."""


def registration_topic_info(topic: Topic) -> TopicInfo:
    """The part of a topic row that pinning needs: code, type, partitions and delivery
    mode (a PriorityBased topic's bands are its partitions, each pinned like any other).
    Deliberately partial — no partition groups, archive flag or anonymous app, which cost
    queries of their own — and never published: only ``register_consumers`` reads it.
    (The consumers are the catalog's own :func:`~brokers.catalog_loader.consumer_info`:
    it reads only the policy row with its topic and app.)"""
    return TopicInfo(
        code=topic.code,
        type=topic.type,
        partitions=topic.partitions,
        queue=QueueSettings(delivery_mode=topic.delivery_mode),
    )


def registration_snapshot(policies: Sequence[ConsumerPolicy]) -> CatalogSnapshot:
    """A catalog holding just ``policies`` and their topics: enough for the engine to pin
    them, built without reading the rest of the catalog."""
    return CatalogSnapshot(
        topics={p.topic.code: registration_topic_info(p.topic) for p in policies},
        consumers=tuple(consumer_info(p) for p in policies),
    )


def pin_starts(policy_ids: Sequence[int]) -> Pinned:
    """Pin the start of the clustering consumer policies ``policy_ids`` (those that still
    exist), all in one batch: one query, one Redis connection, one round trip."""
    policies = list(
        ConsumerPolicy.objects.filter(pk__in=policy_ids, mode=ConsumerPolicy.Mode.CLUSTERING)
        .select_related("topic", "app")
        .order_by("pk")
    )
    if not policies:
        return {}
    entries = [(p.topic.code, p.app.code, p.start_position) for p in policies]
    return run_on_engine(
        registration_snapshot(policies), lambda engine: engine.register_consumers(entries)
    )


class PinBatch:
    """The consumers created in one transaction, pinned together by one ``on_commit``
    callback (this object)."""

    def __init__(self) -> None:
        self.policy_ids: list[int] = []

    def __call__(self) -> None:
        try:
            pinned = pin_starts(self.policy_ids)
        except (EngineError, OSError, redis.RedisError):
            log.exception("could not pin the start of consumer policies %s", self.policy_ids)
            return
        log.info("pinned the start of %d consumers", len(pinned))
        for (topic, app), positions in pinned.items():
            log.debug("consumer %s on %s starts at %s", app, topic, positions)


def pin_start_on_commit(policy_id: int) -> None:
    """After the creating transaction commits, pin the consumer's start position, in one
    batch with every other consumer created in the same transaction.

    Consumers created in nested savepoints join the batch too: a rolled back savepoint
    either drops the whole batch (registered inside it, so every consumer in it was
    created inside it as well) or leaves an id whose row is gone, which :func:`pin_starts`
    skips. Outside a transaction the consumer is pinned at once.
    """
    add_to_commit_batch(PinBatch, lambda batch: batch.policy_ids.append(policy_id))
