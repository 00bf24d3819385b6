"""Running engine calls from synchronous (Django) tests over the test database's catalog."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import redis.asyncio as aioredis
from django.conf import settings

from brokers.catalog_loader import build_snapshot
from brokers.engine import Engine


def engine_call(fn: Callable[[Engine], Awaitable[Any]]) -> Any:
    """Run ``fn(engine)`` on an engine over the current catalog (from the test database)."""
    snapshot = build_snapshot()

    async def run():
        client = aioredis.from_url(settings.REDIS_URL)
        engine = Engine(client, lambda: snapshot)
        try:
            return await fn(engine)
        finally:
            await engine.close()
            await client.aclose()

    return asyncio.run(run())
