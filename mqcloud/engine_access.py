"""Short engine sessions for the console and its API (through the engine's public API).

Each session opens a Redis client, reads the published catalog snapshot and closes both
when done; the console keeps no engine state between requests.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import redis.asyncio as aioredis
from django.conf import settings

from brokers.engine import Engine, load_snapshot


@asynccontextmanager
async def engine_session() -> AsyncIterator[Engine]:
    """An Engine over the current catalog snapshot, closed on exit."""
    client = aioredis.from_url(settings.REDIS_URL)
    try:
        snapshot = await load_snapshot(client)
        engine = Engine(client, lambda: snapshot)
        try:
            yield engine
        finally:
            await engine.close()
    finally:
        await client.aclose()
