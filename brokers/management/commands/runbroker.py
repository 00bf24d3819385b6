"""``manage.py runbroker --broker-id N [--processes P]``: run one broker.

The broker registers itself in the catalog (creating its Broker row on first start),
heartbeats every BROKER_HEARTBEAT_SECONDS, follows catalog snapshots published on Redis and
serves JMQ4, zbus and VibeMQ on the ports of its catalog row (uvloop when installed).

With ``--processes P`` (default: the machine's cores, BROKER_PROCESSES) it starts P−1
worker processes after registering (:mod:`brokers.worker_processes`): every process listens
on the same ports with SO_REUSEPORT, so the kernel spreads connections over them and one
broker uses every core. They share nothing but Redis (the engine keeps all state there);
the first process heartbeats, marks the broker up and down, and starts a worker that
exited (killed, crashed) again, so the broker gets its core back. On SIGINT/SIGTERM every
process stops gracefully: no new connections, in-flight requests finish (up to a grace
period), leases and partition locks held by sessions are released; then the broker is
marked down.

A broker whose row is removed from the catalog while it runs stops serving (its servers
stop gracefully, as above), says so in its log and in its report, and waits: it serves
again, on the ports of the new row, when the broker is added back, and exits normally when
stopped (worker processes of ``--processes`` follow the row the same way). It does not
exit on its own: under a process manager that would be a crash, and the restarted process
would register itself again.

Every heartbeat each process also publishes its report (state, why it does not serve,
protocol error counts, read-ahead, notification wake-ups, store write times of the last
minute; :func:`brokers.engine.publish_report`):
``broker:<id>`` for the first process, ``broker:<id>:<n>`` for worker n, which the console
shows in ``/healthz`` (the first process's state, and how many processes report) and
``/metrics`` (per process). Before, only the first process reported: what clients of the
other processes did wrong — most of a 16-core broker's connections — was counted nowhere.
"""

from __future__ import annotations

import argparse
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
from django.db import DatabaseError, connection, transaction
from django.utils import timezone
from redis.exceptions import RedisError

from brokers.catalog_loader import changed_on_commit
from brokers.engine import (
    AnyRedis,
    Engine,
    StoreUnavailable,
    publish_report,
    record_exit,
    withdraw_report,
)
from brokers.engine.catalog import CatalogSnapshot, CatalogWatcher
from brokers.engine.redisio import broker_client
from brokers.models import Broker, Cluster
from brokers.servers.jmq4 import ServerConfig as Jmq4Config
from brokers.servers.jmq4 import install_uvloop, start_jmq4_server
from brokers.servers.protocol_errors import protocol_errors
from brokers.servers.readahead import ReadAheadBudget
from brokers.servers.runtime import tune_gc
from brokers.servers.vibemq import config_from, start_vibemq_server
from brokers.servers.zbus import start_zbus_server
from brokers.worker_processes import PORT_NAMES, WorkerProcesses, follow_parent, parse_ports

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
        parser.add_argument(
            "--processes",
            type=int,
            default=settings.BROKER_PROCESSES,
            help="Processes sharing the ports with SO_REUSEPORT (default: BROKER_PROCESSES, "
            "else the machine's cores).",
        )
        # how the first process starts its workers (brokers.worker_processes)
        parser.add_argument("--worker", type=int, default=0, help=argparse.SUPPRESS)
        parser.add_argument("--worker-of", type=int, default=0, help=argparse.SUPPRESS)
        parser.add_argument("--worker-ports", default="", help=argparse.SUPPRESS)

    def handle(self, *args: object, **options: object) -> None:
        broker_id = int(options["broker_id"])
        if broker_id < 1:
            raise CommandError("--broker-id must be a positive integer")
        try:
            read_ahead = ReadAheadBudget.from_environment()
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        bind = str(options["bind"])
        if options.get("worker"):
            self._serve_as_worker(broker_id, bind, options, read_ahead)
            return
        broker = register(broker_id, options.get("cluster"), options.get("host"))
        self.stdout.write(
            f"broker {broker.id} registered: {broker.host} jmq4={broker.jmq4_port}"
            f" zbus={broker.zbus_port} vibemq={broker.vibemq_port}"
        )
        processes = int(options["processes"] or os.cpu_count() or 1)
        if processes < 1:
            raise CommandError("--processes must be a positive integer")
        install_uvloop()
        ports = {
            "bind": bind,
            "jmq4_port": broker.jmq4_port,
            "zbus_port": broker.zbus_port,
            "vibemq_port": broker.vibemq_port,
            "reuse_port": processes > 1,
            "read_ahead": read_ahead,
        }
        served = {name: ports[name] for name in PORT_NAMES}
        workers = WorkerProcesses(broker.id, processes - 1, bind, served)
        workers.start()
        try:
            asyncio.run(run(broker.id, **ports, workers=workers))
        finally:
            workers.stop()
        self.stdout.write(f"broker {broker.id} stopped")

    def _serve_as_worker(
        self, broker_id: int, bind: str, options: dict, read_ahead: ReadAheadBudget
    ) -> None:
        """A worker process (:mod:`brokers.worker_processes`): serve the ports it was told
        beside the first process until told to stop, never heartbeat."""
        number = int(options["worker"])
        try:
            ports = parse_ports(str(options["worker_ports"]))
        except ValueError as exc:
            raise CommandError(f"--worker-ports: {exc}") from None
        if not follow_parent(int(options["worker_of"] or 0)):
            return  # the first process died before this one started: nothing to serve for
        install_uvloop()
        try:
            asyncio.run(
                run(
                    broker_id,
                    bind=bind,
                    **ports,
                    reuse_port=True,
                    worker=number,
                    read_ahead=read_ahead,
                )
            )
        except Exception:
            log.exception("broker %s worker %s failed", broker_id, number)
            raise SystemExit(1) from None


@transaction.atomic
def register(broker_id: int, cluster_name: object, host: object) -> Broker:
    """Create or refresh this broker's catalog row. A new row is not up yet: the first
    heartbeat marks it up once its servers listen, so a broker that cannot bind its ports
    (taken by another process) is never shown up while it exits and is restarted."""
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
    Broker.objects.filter(id=broker_id).update(up_since=timezone.now())
    changed_on_commit(brokers=[broker_id])
    return True


def _beat(broker_id: int) -> bool:
    """Heartbeat (marking the broker up again if it was down); False when it was removed."""
    if _was_down(broker_id):
        return _mark_up(broker_id)
    return _heartbeat(broker_id)


def _present(broker_id: int) -> bool:
    """Whether the broker's row is in the catalog (what a worker process follows)."""
    return Broker.objects.filter(id=broker_id).exists()


def _ports(broker_id: int) -> dict[str, int | None]:
    row = Broker.objects.filter(id=broker_id).values("jmq4_port", "zbus_port", "vibemq_port")
    return dict(row.first() or {})


@transaction.atomic
def _mark_down(broker_id: int) -> None:
    Broker.objects.filter(id=broker_id).update(status=Broker.Status.DOWN, up_since=None)
    changed_on_commit(brokers=[broker_id])


def _forget_connection() -> None:
    """Close this thread's database connection (broken by an outage): the next query
    opens a new one."""
    with contextlib.suppress(DatabaseError):
        connection.close()


class CatalogRow:
    """A broker process's hold on its catalog row in PostgreSQL: the first process
    heartbeats, workers follow the row.

    Brokers serve from Redis alone; the database only records that they are up. So a
    database outage (a restart, a failover, a cut network) must not end a broker: the
    heartbeat is skipped and logged once, and the broker goes on serving what its row said
    last; it heartbeats again once the database answers (after a long outage the console may
    have marked it down meanwhile: the heartbeat marks it up again)."""

    def __init__(self, broker_id: int, worker: int) -> None:
        self.broker_id = broker_id
        self.worker = worker
        self.unavailable_since: float | None = None

    async def check(self) -> bool | None:
        """Heartbeat or check the row: whether the broker is in the catalog; None when the
        database did not answer."""
        try:
            present = await sync_to_async(_present if self.worker else _beat)(self.broker_id)
        except DatabaseError as exc:
            await sync_to_async(_forget_connection)()
            if self.unavailable_since is None:
                self.unavailable_since = time.monotonic()
                log.warning(
                    "broker %s: the catalog database does not answer (%s); serving on,"
                    " retrying every heartbeat",
                    self.broker_id,
                    (str(exc).strip().splitlines() or [type(exc).__name__])[0],
                )
            return None
        if self.unavailable_since is not None:
            log.warning(
                "broker %s: the catalog database answers again (after %.1f s)",
                self.broker_id,
                time.monotonic() - self.unavailable_since,
            )
            self.unavailable_since = None
        return present

    async def mark_down(self) -> None:
        """Mark the broker down as it stops; when the database does not answer, the
        console marks it down once its heartbeats are missed."""
        try:
            await sync_to_async(_mark_down)(self.broker_id)
        except DatabaseError as exc:
            log.warning(
                "broker %s: not marked down, the database does not answer: %s", self.broker_id, exc
            )


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
    reuse_port: bool = False,
    read_ahead: ReadAheadBudget | None = None,
) -> list[ProtocolServer]:
    """Start every protocol server whose port is set; each stops gracefully on its own.
    ``read_ahead``: the budget the process's servers share (default: one each)."""
    servers: list[ProtocolServer] = []
    if jmq4_port is not None:
        servers.append(
            await start_jmq4_server(
                engine,
                watcher,
                bind,
                jmq4_port,
                broker_id,
                config=Jmq4Config(request_timeout_ms=settings.JMQ4_REQUEST_TIMEOUT_MS),
                reuse_port=reuse_port,
            )
        )
    if zbus_port is not None:
        servers.append(
            await start_zbus_server(
                engine,
                watcher,
                bind,
                zbus_port,
                broker_id,
                reuse_port=reuse_port,
                read_ahead=read_ahead,
            )
        )
    if vibemq_port is not None:
        config = config_from(settings)
        servers.append(
            await start_vibemq_server(
                engine,
                watcher,
                bind,
                vibemq_port,
                broker_id,
                config=config,
                reuse_port=reuse_port,
                read_ahead=read_ahead,
            )
        )
    return servers


async def run(
    broker_id: int,
    *,
    bind: str = "127.0.0.1",
    jmq4_port: int | None = None,
    zbus_port: int | None = None,
    vibemq_port: int | None = None,
    reuse_port: bool = False,
    worker: int = 0,
    read_ahead: ReadAheadBudget | None = None,
    workers: WorkerProcesses | None = None,
) -> None:
    """Serve the protocols, heartbeat (process 0 only; ``worker`` n > 0 only serves) and
    follow the catalog until SIGINT or SIGTERM; ``read_ahead`` is the process's budget
    (default: ``BROKER_READ_AHEAD_MB``); the first process keeps ``workers`` running."""
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
    # a process that stops renewing its group leases for two of these is taken for dead
    # and its leases handed on (brokers.engine.holders): five heartbeats, 10 s by default
    holder_ttl_ms = round(settings.BROKER_HEARTBEAT_SECONDS * 5000)
    engine = Engine(
        client, lambda: watcher.current, broker_id=broker_id, holder_ttl_ms=holder_ttl_ms
    )
    engine.holders.start()
    ports = {"jmq4_port": jmq4_port, "zbus_port": zbus_port, "vibemq_port": vibemq_port}
    read_ahead = read_ahead or ReadAheadBudget.from_environment()
    servers = await start_servers(
        engine, watcher, broker_id, bind, **ports, reuse_port=reuse_port, read_ahead=read_ahead
    )
    tune_gc()
    report = Report(broker_id, read_ahead, worker=worker, engine=engine)
    row = CatalogRow(broker_id, worker)
    try:
        while not stop.is_set():
            # the first process heartbeats; workers only follow the catalog row
            present = await row.check()
            if present is None:  # the database cannot say: serve on as before
                present = bool(servers)
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
                if workers is not None:  # a worker started from now on serves these
                    workers.ports = {name: ports.get(name) for name in PORT_NAMES}
                servers = await start_servers(
                    engine,
                    watcher,
                    broker_id,
                    bind,
                    **ports,
                    reuse_port=reuse_port,
                    read_ahead=read_ahead,
                )
                report.serving()
                log.warning("broker %s is in the catalog again: serving", broker_id)
            await report.publish(client, settings.BROKER_HEARTBEAT_SECONDS)
            if workers is not None:
                for ended in workers.supervise():  # for the alerts; a Redis outage skips it
                    with contextlib.suppress(StoreUnavailable, RedisError, OSError):
                        await record_exit(client, ended)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), settings.BROKER_HEARTBEAT_SECONDS)
    finally:
        await asyncio.gather(*(server.stop() for server in servers))
        await engine.close()
        await watcher.stop()
        await report.withdraw(client)
        if not worker:
            await row.mark_down()
        await client.aclose()
        await client.connection_pool.disconnect()


class Report:
    """This broker process's report (:func:`brokers.engine.publish_report`): named
    ``broker:<id>`` for the first process, ``broker:<id>:<n>`` for worker ``n``."""

    def __init__(
        self,
        broker_id: int,
        read_ahead: ReadAheadBudget | None = None,
        *,
        worker: int = 0,
        engine: Engine | None = None,
    ) -> None:
        self.name = f"broker:{broker_id}" + (f":{worker}" if worker else "")
        self.read_ahead = read_ahead
        self.engine = engine
        self.doc: dict[str, object] = {
            "broker": broker_id,
            "process": worker,
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
        if self.read_ahead is not None:
            budget = self.read_ahead
            self.doc["read_ahead"] = {
                "held_bytes": budget.held,
                "peak_bytes": budget.peak,
                "limit_bytes": budget.limit,
                "refused": budget.refused,
            }
        if self.engine is not None:
            self.doc["store_writes"] = self.engine.durability.latency.summary()
            notifier = self.engine.notifier
            self.doc["wakeups"] = {
                "claimed": notifier.claims_made,
                "deferred": notifier.wakes_skipped,
                "handed_back": notifier.claims_left,
                "reconnects": notifier.reconnects,
            }
        with contextlib.suppress(StoreUnavailable, RedisError, OSError):
            await publish_report(client, self.name, self.doc, valid_for_s=3 * heartbeat_s)

    async def withdraw(self, client: AnyRedis) -> None:
        with contextlib.suppress(StoreUnavailable, RedisError, OSError):
            await withdraw_report(client, self.name)
