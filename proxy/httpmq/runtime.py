"""The engine of one HTTP-MQ serving process: a Redis client, the catalog watcher (the
snapshot and the token lookup in memory) and an :class:`Engine` on them.

Made when the process starts serving (ASGI lifespan) and closed when it stops. No consumer
state is kept here — it is all in Redis — so any process can serve any request.
"""

from __future__ import annotations

from brokers.engine import AnyRedis, CatalogSnapshot, CatalogWatcher, Engine, broker_client
from proxy.httpmq.config import ProxyConfig


class Runtime:
    """Engine and catalog watcher of this process."""

    def __init__(self, redis: AnyRedis, watcher: CatalogWatcher) -> None:
        self.redis = redis
        self.watcher = watcher
        self.engine = Engine(redis, lambda: watcher.current)

    @property
    def catalog(self) -> CatalogSnapshot:
        """The newest catalog snapshot this process has."""
        return self.watcher.current

    @classmethod
    async def start(cls, config: ProxyConfig) -> Runtime:
        """Connect to Redis and load the catalog."""
        client = broker_client(config.redis_url, max_connections=config.redis_connections)
        watcher = CatalogWatcher(client, resync_interval=5.0)
        await watcher.start()
        return cls(client, watcher)

    async def close(self) -> None:
        """Flush the engine's counters, stop following the catalog, disconnect."""
        await self.engine.close()
        await self.watcher.stop()
        await self.redis.aclose()
        await self.redis.connection_pool.disconnect()
