"""Erase what the message store keeps for a catalog row being deleted.

A deleted topic leaves its messages, every group's progress, retries, dead letters,
transactions and delayed messages in Redis; a deleted consumer policy leaves its group's
progress, retries and dead letters — and a topic or consumer created later under the same
name found them (``Engine.erase_topic`` / ``Engine.erase_group``,
:mod:`brokers.engine.erase`). Every path that deletes such a row calls these inside the
deleting transaction: applications, the REST API and the Django admin, so a Redis failure
(raised) keeps the row. Neither needs the catalog: a short-lived engine over an empty
snapshot does it (:mod:`brokers.engine_run`).

A queue topic's dead-letter queue ``<topic>.dlq`` has no catalog row of its own (the
engine serves it under the topic's policies), so it goes with its topic — its dead
letters and every group's progress on it — unless the catalog has a topic of that name,
which is another topic.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import redis

from brokers.engine import DLQ_SUFFIX, CatalogSnapshot, Engine, EngineError
from brokers.engine_run import run_on_engine

if TYPE_CHECKING:
    from brokers.models import ConsumerPolicy, Topic

_EMPTY = CatalogSnapshot()
STORE_ERRORS = (EngineError, redis.RedisError, OSError)
"""What an erase raises when the message store does not answer."""


def _with_implicit_dlq(topic: Topic) -> list[str]:
    """``topic``'s code and its dead-letter queue (the name its settings give, or
    ``<code>.dlq``), unless that is a catalog topic of its own."""
    from brokers.models import Topic

    code, named = topic.code, topic.dead_letter_queue
    if not named and code.endswith(DLQ_SUFFIX):  # an implicit DLQ has none
        return [code]
    dlq = named or code + DLQ_SUFFIX
    return [code] if Topic.objects.filter(code=dlq).exists() else [code, dlq]


def erase_topic_data(topic: Topic) -> int:
    """Delete every key the engine keeps for ``topic`` (a row being deleted) and its
    implicit dead-letter queue; how many went."""
    codes = _with_implicit_dlq(topic)

    async def erase(engine: Engine) -> int:
        return sum([await engine.erase_topic(c) for c in codes])

    return run_on_engine(_EMPTY, erase)


def erase_group_data(policy: ConsumerPolicy) -> int:
    """Delete every key the engine keeps for the consumer group of ``policy`` (a row
    being deleted) on its topic and the topic's implicit dead-letter queue; how many
    went."""
    codes, app = _with_implicit_dlq(policy.topic), policy.app.code

    async def erase(engine: Engine) -> int:
        return sum([await engine.erase_group(c, app) for c in codes])

    return run_on_engine(_EMPTY, erase)
