"""Pin where a new clustering consumer starts, at the moment it is created (approved).

http-mq.md §13.3: with ``start_position = latest`` a consumer starts at each partition's
end *as of its registration*, so nothing produced between approval and the first fetch is
skipped (mq-proxy took the end at the first lock and lost those messages). Broadcast
clients start at their own first access instead, so they are not pinned here.
"""

from __future__ import annotations

import logging

import redis.asyncio as aioredis
from asgiref.sync import async_to_sync
from django.conf import settings
from django.db import transaction

from brokers.catalog_loader import build_snapshot
from brokers.engine import CatalogSnapshot, Engine, EngineError

log = logging.getLogger(__name__)


async def _pin(snapshot: CatalogSnapshot, topic: str, app: str, start: str) -> dict[int, int]:
    client = aioredis.from_url(settings.REDIS_URL)
    engine = Engine(client, lambda: snapshot)
    try:
        return await engine.register_consumer(topic, app, start=start)
    finally:
        await engine.close()
        await client.aclose()


def pin_start_on_commit(topic: str, app: str, start: str) -> None:
    """After the creating transaction commits, pin the consumer's start position."""

    def pin() -> None:
        try:
            positions = async_to_sync(_pin)(build_snapshot(), topic, app, start)
            log.info("consumer %s on %s starts at %s", app, topic, positions)
        except (EngineError, OSError):
            log.exception("could not pin the start of consumer %s on %s", app, topic)

    transaction.on_commit(pin)
