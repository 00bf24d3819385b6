"""The VibeMQ TCP server: :func:`start_vibemq_server` binds it to a port; graceful stop."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from brokers.engine import CatalogWatcher, Engine
from brokers.protocols.vibemq import shutdown_notice
from brokers.servers.flow import ListeningServer
from brokers.servers.listening import Listener, listen
from brokers.servers.readahead import ReadAheadBudget
from brokers.servers.vibemq.config import ServerConfig
from brokers.servers.vibemq.context import ServerContext
from brokers.servers.vibemq.hub import Hub
from brokers.servers.vibemq.monitor import Monitor, start_monitor
from brokers.servers.vibemq.protocol import VibeMQProtocol

log = logging.getLogger("mqcloud.vibemq")


class VibeMQServer(ListeningServer):
    """A listening VibeMQ server and its open connections."""

    def __init__(
        self,
        ctx: ServerContext,
        hub: Hub,
        server: Listener,
        connections: set,
        monitor: asyncio.Server | None = None,
    ) -> None:
        self.ctx, self.hub = ctx, hub
        super().__init__(server, connections)
        self._monitor = monitor

    @property
    def monitor_port(self) -> int | None:
        """The port of ``/health`` and ``/metrics`` (§15), None when not served."""
        if self._monitor is None:
            return None
        return int(self._monitor.sockets[0].getsockname()[1])

    async def stop(self, grace: float | None = None) -> None:
        """§5 shutdown: stop accepting, tell every client ``disconnect`` (server_shutdown),
        stop dispatching, wait up to ``grace`` seconds for in-flight deliveries to be
        acknowledged, then return the rest to their queues and close."""
        grace = self.ctx.config.shutdown_grace if grace is None else grace
        self._server.close()
        if self._monitor is not None:
            self._monitor.close()
        self.hub.pause_dispatch()
        protocols = list(self._connections)
        notice = shutdown_notice()
        for proto in protocols:
            proto.shutdown_notice(notice)
            if proto.session is not None:
                proto.session.begin_shutdown()
        sessions = [p.session for p in protocols if p.session is not None]
        if sessions:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.gather(*(s.wait_settled() for s in sessions)), grace)
        for session in sessions:
            with contextlib.suppress(Exception):
                await session.close()
        for proto in protocols:
            proto.close()
        await self.hub.stop()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._server.wait_closed(), 2.0)


async def start_vibemq_server(
    engine: Engine,
    watcher: CatalogWatcher,
    host: str,
    port: int,
    broker_id: int,
    *,
    config: ServerConfig | None = None,
    reuse_port: bool = False,
    read_ahead: ReadAheadBudget | None = None,
) -> VibeMQServer:
    """Listen for VibeMQ on ``host:port`` as broker ``broker_id`` (``port`` 0 picks one);
    ``read_ahead``: the process's budget (default: one of its own)."""
    engine.credentials.follow(watcher)  # a rotated app token closes its connections
    ctx = ServerContext(
        engine=engine, watcher=watcher, config=config or ServerConfig(), broker_id=broker_id
    )
    if read_ahead is not None:
        ctx.read_ahead = read_ahead
    hub = Hub(ctx)
    await hub.start()
    connections: set[VibeMQProtocol] = set()
    server = await listen(
        lambda: VibeMQProtocol(ctx, hub, connections), host, port, reuse_port=reuse_port
    )
    monitor = None
    if ctx.config.monitor_port is not None:
        monitor = await start_monitor(Monitor(ctx, hub), host, ctx.config.monitor_port)
    log.info("VibeMQ broker %s listening on %s:%s", broker_id, host, port)
    return VibeMQServer(ctx, hub, server, connections, monitor)
