"""The JMQ4 server: :func:`start_jmq4_server` binds the protocol to a port; graceful stop."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from brokers.engine import CatalogWatcher, Engine
from brokers.servers.flow import ListeningServer, drain
from brokers.servers.jmq4.connection import release_locks
from brokers.servers.jmq4.context import ServerConfig, ServerContext
from brokers.servers.jmq4.protocol import Jmq4Protocol
from brokers.servers.listening import Listener, listen

log = logging.getLogger("mqcloud.jmq4")


class Jmq4Server(ListeningServer):
    """A listening JMQ4 server and its open connections."""

    def __init__(self, ctx: ServerContext, server: Listener, connections: set) -> None:
        self.ctx = ctx
        super().__init__(server, connections)

    async def stop(self, grace: float | None = None) -> None:
        """Stop accepting, let in-flight requests finish (up to ``grace`` seconds, then cancel
        them), release the partition locks sessions still hold, and close every connection."""
        grace = self.ctx.config.shutdown_grace if grace is None else grace
        self._server.close()
        protocols = list(self._connections)
        await drain(protocols, grace)
        for proto in protocols:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(release_locks(self.ctx, proto.session), 5.0)
            proto.close()
        if self.ctx.cleanups:
            await asyncio.wait(set(self.ctx.cleanups), timeout=5.0)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._server.wait_closed(), 2.0)


def install_uvloop() -> bool:
    """Use uvloop for new event loops when it is installed; True if it is."""
    try:
        import uvloop
    except ImportError:
        return False
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    return True


async def start_jmq4_server(
    engine: Engine,
    watcher: CatalogWatcher,
    host: str,
    port: int,
    broker_id: int,
    *,
    config: ServerConfig | None = None,
    reuse_port: bool = False,
) -> Jmq4Server:
    """Listen for JMQ4 on ``host:port`` as broker ``broker_id`` (``port`` 0 picks a free one)."""
    engine.credentials.follow(watcher)  # a rotated app token closes its connections
    ctx = ServerContext(
        engine=engine,
        catalog=lambda: watcher.current,
        broker_id=broker_id,
        config=config or ServerConfig(),
    )
    connections: set[Jmq4Protocol] = set()
    server = await listen(lambda: Jmq4Protocol(ctx, connections), host, port, reuse_port=reuse_port)
    log.info("JMQ4 broker %s listening on %s:%s", broker_id, host, port)
    return Jmq4Server(ctx, server, connections)
