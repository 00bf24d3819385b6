"""The zbus server: :func:`start_zbus_server` binds the protocol to a port; graceful stop."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
from dataclasses import replace

from brokers.engine import CatalogWatcher, Engine, cancel_and_wait
from brokers.servers.flow import ListeningServer, drain
from brokers.servers.listening import Listener, listen
from brokers.servers.readahead import ReadAheadBudget
from brokers.servers.zbus.census import Census
from brokers.servers.zbus.config import ZbusConfig
from brokers.servers.zbus.context import ServerContext
from brokers.servers.zbus.protocol import ZbusProtocol
from brokers.servers.zbus.relay import Relay
from brokers.servers.zbus.track import BOARD, DEMAND_BOARD, run_reporter

log = logging.getLogger("mqcloud.zbus")


class ZbusServer(ListeningServer):
    """A listening zbus server and its open connections."""

    def __init__(
        self, ctx: ServerContext, server: Listener, connections: set[ZbusProtocol]
    ) -> None:
        self.ctx = ctx
        super().__init__(server, connections)
        self._reporter = ctx.spawn(run_reporter(ctx), "zbus-reporter")
        ctx.watcher.on_change(self._catalog_changed)

    def _catalog_changed(self, _snapshot: object) -> None:
        """Queue MQs whose consumers the change concerns look again."""
        try:
            for mq in list(self.ctx.queues.values()):
                mq.catalog_changed()
        except Exception:  # the watcher's other listeners still run
            log.exception("zbus queues missed a catalog change")

    async def stop(self, grace: float | None = None) -> None:
        """Stop accepting, let running requests finish (up to ``grace`` seconds), give
        in-flight queue messages back, and close every connection."""
        grace = self.ctx.config.shutdown_grace if grace is None else grace
        self._server.close()
        self._reporter.cancel()
        self.ctx.watcher.off_change(self._catalog_changed)
        protocols = list(self._connections)
        await drain(protocols, grace)
        for runtime in [*self.ctx.queues.values(), *self.ctx.pubsubs.values()]:
            await runtime.stop()
        for proto in protocols:
            proto.conn.close()  # releases in-flight messages (background tasks)
            proto.close()
        background = [t for t in self.ctx.background if not t.done()]
        if background:
            _, still = await asyncio.wait(background, timeout=grace)
            for task in still:
                task.cancel()
        if self.ctx.census is not None:
            await self.ctx.census.stop()
        if self.ctx.relay is not None:
            await self.ctx.relay.stop()
        # ended before its reports are withdrawn: a lost cancellation
        # (brokers.engine.background) left it publishing them again
        await cancel_and_wait(self._reporter)
        with contextlib.suppress(Exception):
            await self.ctx.engine.withdraw_report(BOARD, self.ctx.address)
            await self.ctx.engine.withdraw_report(DEMAND_BOARD, self.ctx.address)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._server.wait_closed(), 2.0)


def _loopback(host: str) -> bool:
    """Whether ``host`` (a bind address) is reachable from this machine only."""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


async def start_zbus_server(
    engine: Engine,
    watcher: CatalogWatcher,
    host: str,
    port: int,
    broker_id: int,
    *,
    config: ZbusConfig | None = None,
    reuse_port: bool = False,
    read_ahead: ReadAheadBudget | None = None,
) -> ZbusServer:
    """Listen for zbus on ``host:port`` as broker ``broker_id`` (``port`` 0 picks a free
    one); ``read_ahead``: the process's budget (default: one of its own)."""
    config = config or ZbusConfig.from_environment()
    connections: set[ZbusProtocol] = set()
    engine.credentials.follow(watcher)  # a rotated app token closes its connections
    ctx = ServerContext(
        engine=engine, watcher=watcher, broker_id=broker_id, address="", config=config
    )
    if read_ahead is not None:
        ctx.read_ahead = read_ahead
    if config.max_body_bytes > engine.max_body:
        ctx.config = replace(config, max_body_bytes=engine.max_body)
    relay = Relay(ctx)
    await relay.start()  # before any Temp MQ exists: replies forwarded here are heard
    ctx.relay = relay
    try:
        server = await listen(
            lambda: ZbusProtocol(ctx, connections), host, port, reuse_port=reuse_port
        )
    except BaseException:
        await relay.stop()
        raise
    bound = int(server.sockets[0].getsockname()[1])
    ctx.address = config.advertised or _advertised(watcher, broker_id, host, bound)
    census = Census(ctx, f"{broker_id}|{ctx.address}")  # the processes on this port
    try:
        await census.start()
    except BaseException:
        server.close()
        await relay.stop()
        raise
    ctx.census = census
    ctx.started_ms = engine.now_ms()
    log.info("zbus broker %s listening on %s:%s", broker_id, host, bound)
    if not config.admin_token and not _loopback(host):
        log.warning(
            "zbus admin is open on %s:%s: anyone reaching it may create MQs and read the"
            " admin pages — set ZBUS_ADMIN_TOKEN",
            host,
            bound,
        )
    return ZbusServer(ctx, server, connections)


def _advertised(watcher: CatalogWatcher, broker_id: int, host: str, port: int) -> str:
    info = watcher.current.brokers.get(broker_id)
    if info is not None and info.zbus_port == port:
        return f"{info.host}:{port}"
    return f"{host}:{port}"
