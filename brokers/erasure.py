"""Erase what the message store keeps for a catalog row being deleted.

A deleted topic leaves its messages, every group's progress, retries, dead letters,
transactions and delayed messages in Redis; a deleted consumer policy leaves its group's
progress, retries and dead letters — and a topic or consumer created later under the same
name found them (``Engine.erase_topic`` / ``Engine.erase_group``,
:mod:`brokers.engine.erase`). Every path that deletes such a row calls these inside the
deleting transaction: applications, the REST API and the Django admin, so a Redis failure
(raised) keeps the row. Neither needs the catalog: a short-lived engine over an empty
snapshot does it (:mod:`brokers.engine_run`).
"""

from __future__ import annotations

import redis

from brokers.engine import CatalogSnapshot, EngineError
from brokers.engine_run import run_on_engine

_EMPTY = CatalogSnapshot()
STORE_ERRORS = (EngineError, redis.RedisError, OSError)
"""What an erase raises when the message store does not answer."""


def erase_topic_data(code: str) -> int:
    """Delete every key the engine keeps for topic ``code``; how many went."""
    return run_on_engine(_EMPTY, lambda engine: engine.erase_topic(code))


def erase_group_data(topic: str, app: str) -> int:
    """Delete every key the engine keeps for consumer group ``app`` on ``topic``; how
    many went."""
    return run_on_engine(_EMPTY, lambda engine: engine.erase_group(topic, app))
