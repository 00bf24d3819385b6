"""The web process's engine: one Engine and CatalogWatcher per process, made on first use.

Daphne serves every async view on one event loop, so the engine (and its Redis pool) is
created lazily inside that loop and reused; no consumer state is kept here — it is all in
Redis, so any web process can serve any request.
"""

from __future__ import annotations

import asyncio

import redis.asyncio as aioredis
from django.conf import settings

from brokers.engine import CatalogWatcher, Engine, engine_client


class Runtime:
    """Engine and catalog watcher of this process."""

    def __init__(self, redis: aioredis.Redis, watcher: CatalogWatcher) -> None:
        self.redis = redis
        self.watcher = watcher
        self.engine = Engine(redis, lambda: watcher.current)


_runtime: Runtime | None = None
_loop: asyncio.AbstractEventLoop | None = None
_lock: asyncio.Lock | None = None


async def runtime() -> Runtime:
    """This process's runtime, created on first use in the running loop."""
    global _runtime, _loop, _lock
    loop = asyncio.get_running_loop()
    if _runtime is not None and _loop is loop:
        return _runtime
    if _lock is None or _loop is not loop:
        _lock, _loop, _runtime = asyncio.Lock(), loop, None
    async with _lock:
        if _runtime is None:
            client = engine_client(settings.REDIS_URL)
            watcher = CatalogWatcher(client, resync_interval=5.0)
            await watcher.start()
            _runtime = Runtime(client, watcher)
    return _runtime
