"""Erase what the message store keeps for a catalog row being deleted.

A deleted topic leaves its messages, every group's progress, retries, dead letters,
transactions and delayed messages in Redis; a deleted consumer policy leaves its group's
progress, retries and dead letters — and a topic or consumer created later under the same
name found them (``Engine.erase_topic`` / ``Engine.erase_group``,
:mod:`brokers.engine.erase`). Every path that deletes such a row calls these inside the
deleting transaction: applications, the REST API and the Django admin, so a Redis failure
(raised) keeps the row. Neither needs the catalog: an engine over an empty snapshot, on a
short-lived Redis client, does it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import redis
import redis.asyncio as aioredis
from asgiref.sync import async_to_sync
from django.conf import settings

from brokers.engine import CatalogSnapshot, Engine, EngineError

_EMPTY = CatalogSnapshot()
STORE_ERRORS = (EngineError, redis.RedisError, OSError)
"""What an erase raises when the message store does not answer."""


def _run(call: Callable[[Engine], Awaitable[int]]) -> int:
    async def run() -> int:
        client = aioredis.from_url(settings.REDIS_URL)
        engine = Engine(client, lambda: _EMPTY)
        try:
            return await call(engine)
        finally:
            await engine.close()
            await client.aclose()

    return async_to_sync(run)()


def erase_topic_data(code: str) -> int:
    """Delete every key the engine keeps for topic ``code``; how many went."""
    return _run(lambda engine: engine.erase_topic(code))


def erase_group_data(topic: str, app: str) -> int:
    """Delete every key the engine keeps for consumer group ``app`` on ``topic``; how
    many went."""
    return _run(lambda engine: engine.erase_group(topic, app))
