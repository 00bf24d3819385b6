"""One engine call from the catalog's synchronous code (signals, the Django admin,
applications): a Redis client on ``REDIS_URL`` and an engine over the snapshot given,
both closed after the call."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

import redis.asyncio as aioredis
from asgiref.sync import async_to_sync
from django.conf import settings

from brokers.engine import CatalogSnapshot, Engine

T = TypeVar("T")


def run_on_engine(snapshot: CatalogSnapshot, call: Callable[[Engine], Awaitable[T]]) -> T:
    """``call(engine)`` on a short-lived engine over ``snapshot``."""

    async def run() -> T:
        client = aioredis.from_url(settings.REDIS_URL)
        engine = Engine(client, lambda: snapshot)
        try:
            return await call(engine)
        finally:
            await engine.close()
            await client.aclose()

    return async_to_sync(run)()
