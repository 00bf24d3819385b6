"""Short engine sessions for the console and its API (through the engine's public API).

Each session opens a Redis client and brings this process's catalog up to date — one
read of the catalog log, which is empty when nothing changed — and closes the client
when done. The catalog itself is kept by the process between sessions (the one
``brokers.catalog_loader.process_catalog`` that its synchronous readers share too), so a
console request never decodes the whole catalog.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import redis.asyncio as aioredis
from asgiref.sync import async_to_sync
from django.conf import settings

from brokers.catalog_loader import process_catalog
from brokers.engine import Engine, catch_up


@asynccontextmanager
async def engine_session() -> AsyncIterator[Engine]:
    """An Engine over the newest catalog, closed on exit."""
    client = aioredis.from_url(settings.REDIS_URL)
    try:
        await catch_up(client, process_catalog)
        snapshot = process_catalog.current
        engine = Engine(client, lambda: snapshot)
        try:
            yield engine
        finally:
            await engine.close()
    finally:
        await client.aclose()


def erase_topic_data(code: str) -> int:
    """Delete every key the engine keeps for topic ``code`` (``Engine.erase_topic``): for
    a topic being deleted, called inside the deleting transaction so that a Redis
    failure keeps the topic. How many keys went."""

    async def erase() -> int:
        async with engine_session() as engine:
            return await engine.erase_topic(code)

    return async_to_sync(erase)()


def erase_group_data(topic: str, app: str) -> int:
    """Delete every key the engine keeps for consumer group ``app`` on ``topic``
    (``Engine.erase_group``): for a consumer policy being deleted, inside the deleting
    transaction. How many keys went."""

    async def erase() -> int:
        async with engine_session() as engine:
            return await engine.erase_group(topic, app)

    return async_to_sync(erase)()
