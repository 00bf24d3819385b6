"""``manage.py runbroker --broker-id N``: run one broker process.

The process registers itself in the catalog (creating its Broker row on first start),
heartbeats every BROKER_HEARTBEAT_SECONDS, follows catalog snapshots published on Redis and
serves JMQ4, zbus and VibeMQ on the ports of its catalog row (uvloop when installed). On
SIGINT/SIGTERM it stops gracefully: no new connections, in-flight requests finish (up to a
grace period), partition locks held by sessions are released, then it marks itself down.

A broker whose row is removed from the catalog while it runs stops serving (its servers
stop gracefully, as above), says so in its log and in its report, and waits: it serves
again, on the ports of the new row, when the broker is added back, and exits normally when
stopped. It does not exit on its own: under a process manager that would be a crash, and
the restarted process would register itself again.

Every heartbeat the process also publishes its report (state, why it does not serve,
protocol error counts; :func:`brokers.engine.publish_report`), which the console shows in
``/healthz`` and ``/metrics``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from typing import Protocol

from asgiref.sync import sync_to_async
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction
from django.utils import timezone
from redis.exceptions import RedisError

from brokers.catalog_loader import publish_on_commit
from brokers.engine import (
    AnyRedis,
    Engine,
    StoreUnavailable,
    publish_report,
    withdraw_report,
)
from brokers.engine.catalog import CatalogSnapshot, CatalogWatcher
from brokers.engine.redisio import broker_client
from brokers.models import Broker, Cluster
from brokers.servers.jmq4 import install_uvloop, start_jmq4_server
from brokers.servers.protocol_errors import protocol_errors
from brokers.servers.runtime import tune_gc
from brokers.servers.vibemq import config_from, start_vibemq_server
from brokers.servers.zbus import start_zbus_server

log = logging.getLogger("mqcloud.broker")


class Command(BaseCommand):
    help = "Run a broker process: register, heartbeat and follow the catalog."
    # No system checks: they import the whole URLconf (views, DRF, the schema), a quarter
    # of a broker's start, which a restart after a crash waits for; the web process and
    # `make test` run them.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--broker-id", type=int, required=True)
        parser.add_argument("--cluster", default=None, help="Cluster to register in if new.")
        parser.add_argument("--host", default=None, help="Advertised host (default: catalog).")
        parser.add_argument(
            "--bind",
            default=settings.BROKER_BIND_HOST,
            help="Address the protocol servers listen on (default: BROKER_BIND_HOST).",
        )

    def handle(self, *args: object, **options: object) -> None:
        broker_id = int(options["broker_id"])
        if broker_id < 1:
            raise CommandError("--broker-id must be a positive integer")
        broker = register(broker_id, options.get("cluster"), options.get("host"))
        self.stdout.write(
            f"broker {broker.id} registered: {broker.host} jmq4={broker.jmq4_port}"
            f" zbus={broker.zbus_port} vibemq={broker.vibemq_port}"
        )
        install_uvloop()
        asyncio.run(
            run(
                broker.id,
                bind=str(options["bind"]),
                jmq4_port=broker.jmq4_port,
                zbus_port=broker.zbus_port,
                vibemq_port=broker.vibemq_port,
            )
        )
        self.stdout.write(f"broker {broker.id} stopped")


@transaction.atomic
def register(broker_id: int, cluster_name: object, host: object) -> Broker:
    """Create or refresh this broker's catalog row and mark it up."""
    broker = Broker.objects.select_for_update().filter(id=broker_id).first()
    if broker is None:
        cluster = (
            Cluster.objects.get(name=cluster_name)
            if cluster_name
            else Cluster.objects.order_by("id").first()
        )
        if cluster is None:
            raise CommandError("no cluster in the catalog; create one or run loaddemo")
        broker = Broker(
            id=broker_id,
            cluster=cluster,
            host=str(host or settings.BROKER_ADVERTISED_HOST),
            jmq4_port=settings.JMQ4_PORT,
            zbus_port=settings.ZBUS_PORT,
            vibemq_port=settings.VIBEMQ_PORT,
        )
        broker.full_clean()
    elif host:
        broker.host = str(host)
    broker.status = Broker.Status.UP
    broker.last_heartbeat = timezone.now()
    broker.save()
    return broker


def _heartbeat(broker_id: int) -> bool:
    """Record a heartbeat; False when the broker's row is gone from the catalog."""
    updated = Broker.objects.filter(id=broker_id).update(
        last_heartbeat=timezone.now(), status=Broker.Status.UP
    )
    return bool(updated)


def _was_down(broker_id: int) -> bool:
    return Broker.objects.filter(id=broker_id).exclude(status=Broker.Status.UP).exists()


@transaction.atomic
def _mark_up(broker_id: int) -> bool:
    if not _heartbeat(broker_id):
        return False
    publish_on_commit()
    return True


def _beat(broker_id: int) -> bool:
    """Heartbeat (marking the broker up again if it was down); False when it was removed."""
    if _was_down(broker_id):
        return _mark_up(broker_id)
    return _heartbeat(broker_id)


def _ports(broker_id: int) -> dict[str, int | None]:
    row = Broker.objects.filter(id=broker_id).values("jmq4_port", "zbus_port", "vibemq_port")
    return dict(row.first() or {})


@transaction.atomic
def _mark_down(broker_id: int) -> None:
    Broker.objects.filter(id=broker_id).update(status=Broker.Status.DOWN)
    publish_on_commit()


class ProtocolServer(Protocol):
    """What runbroker needs of a protocol server: a graceful stop."""

    async def stop(self) -> None: ...


async def start_servers(
    engine: Engine,
    watcher: CatalogWatcher,
    broker_id: int,
    bind: str,
    *,
    jmq4_port: int | None,
    zbus_port: int | None,
    vibemq_port: int | None,
) -> list[ProtocolServer]:
    """Start every protocol server whose port is set; each stops gracefully on its own."""
    servers: list[ProtocolServer] = []
    if jmq4_port is not None:
        servers.append(await start_jmq4_server(engine, watcher, bind, jmq4_port, broker_id))
    if zbus_port is not None:
        servers.append(await start_zbus_server(engine, watcher, bind, zbus_port, broker_id))
    if vibemq_port is not None:
        config = config_from(settings)
        servers.append(
            await start_vibemq_server(engine, watcher, bind, vibemq_port, broker_id, config=config)
        )
    return servers


async def run(
    broker_id: int,
    *,
    bind: str = "127.0.0.1",
    jmq4_port: int | None = None,
    zbus_port: int | None = None,
    vibemq_port: int | None = None,
) -> None:
    """Serve the protocols, heartbeat and follow the catalog until SIGINT or SIGTERM."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    client = broker_client(settings.REDIS_URL, max_connections=settings.BROKER_REDIS_CONNECTIONS)
    watcher = CatalogWatcher(client)

    def changed(snapshot: CatalogSnapshot) -> None:
        log.info(
            "broker %s: catalog version %s (%d topics)",
            broker_id,
            snapshot.version,
            len(snapshot.topics),
        )

    watcher.on_change(changed)
    await watcher.start()
    engine = Engine(client, lambda: watcher.current, broker_id=broker_id)
    ports = {"jmq4_port": jmq4_port, "zbus_port": zbus_port, "vibemq_port": vibemq_port}
    servers = await start_servers(engine, watcher, broker_id, bind, **ports)
    tune_gc()
    report = Report(broker_id)
    try:
        while not stop.is_set():
            present = await sync_to_async(_beat)(broker_id)
            if not present and servers:
                log.warning(
                    "broker %s was removed from the catalog: stopped serving; waiting to be"
                    " added back (or stopped)",
                    broker_id,
                )
                report.removed(f"broker {broker_id} was removed from the catalog")
                await asyncio.gather(*(server.stop() for server in servers))
                servers = []
            elif present and not servers:
                ports = await sync_to_async(_ports)(broker_id)
                servers = await start_servers(engine, watcher, broker_id, bind, **ports)
                report.serving()
                log.warning("broker %s is in the catalog again: serving", broker_id)
            await report.publish(client, settings.BROKER_HEARTBEAT_SECONDS)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), settings.BROKER_HEARTBEAT_SECONDS)
    finally:
        await asyncio.gather(*(server.stop() for server in servers))
        await engine.close()
        await watcher.stop()
        await report.withdraw(client)
        await sync_to_async(_mark_down)(broker_id)
        await client.aclose()
        await client.connection_pool.disconnect()


class Report:
    """This broker process's report (:func:`brokers.engine.publish_report`)."""

    def __init__(self, broker_id: int) -> None:
        self.name = f"broker:{broker_id}"
        self.doc: dict[str, object] = {
            "broker": broker_id,
            "pid": os.getpid(),
            "state": "serving",
            "reason": "",
            "since": time.time(),
        }

    def serving(self) -> None:
        self.doc.update(state="serving", reason="", since=time.time())

    def removed(self, reason: str) -> None:
        self.doc.update(state="removed", reason=reason, since=time.time())

    async def publish(self, client: AnyRedis, heartbeat_s: float) -> None:
        """Publish, valid for three heartbeats; a Redis outage only skips this one."""
        self.doc["protocol_errors"] = protocol_errors.snapshot()
        with contextlib.suppress(StoreUnavailable, RedisError, OSError):
            await publish_report(client, self.name, self.doc, valid_for_s=3 * heartbeat_s)

    async def withdraw(self, client: AnyRedis) -> None:
        with contextlib.suppress(StoreUnavailable, RedisError, OSError):
            await withdraw_report(client, self.name)
