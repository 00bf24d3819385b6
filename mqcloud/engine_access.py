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
