"""This serving process's report on the ``httpmq`` board
(:func:`brokers.engine.publish_report`): who it is — host, port, process number, pid,
since when —, the catalog version it serves and how long its store writes took in the
last minute (``store_writes``), renewed every ``report_seconds`` and valid for three of
them. The console lists the processes from the board; a report left past its time (a
process killed, a host that went away) is what the proxy-down alert finds. A stopping
process withdraws its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time

from redis.exceptions import RedisError

from brokers.engine import (
    Engine,
    StoreUnavailable,
    cancel_and_wait,
    publish_report,
    withdraw_report,
)

BOARD = "httpmq"
"""The board HTTP-MQ serving processes report on (the console and alerts read it)."""
log = logging.getLogger(__name__)


def service_name(port: int) -> str:
    """``<host name>:<port>``: one HTTP-MQ service of the fleet."""
    return f"{socket.gethostname()}:{port}"


def report_name(port: int, index: int) -> str:
    """``<host name>:<port>/<process number>``: one serving process of the fleet."""
    return f"{service_name(port)}/{index}"


class ProcessReport:
    """Publishes and withdraws one serving process's report."""

    def __init__(self, engine: Engine, bind: str, port: int, index: int, every_s: float) -> None:
        self.engine, self.every_s = engine, every_s
        self.name = report_name(port, index)
        self.doc: dict[str, object] = {
            "host": socket.gethostname(),
            "bind": bind,
            "port": port,
            "process": index,
            "pid": os.getpid(),
            "since": time.time(),
        }
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        while True:
            try:
                await self.publish()
            except Exception:  # a report skipped must not stop the ones after it
                log.exception("HTTP-MQ could not publish its report")
            await asyncio.sleep(self.every_s)

    async def publish(self) -> None:
        """Publish now, valid for three periods (a Redis outage only skips this one)."""
        self.doc["catalog_version"] = self.engine.catalog.version
        self.doc["store_writes"] = self.engine.durability.latency.summary()
        with contextlib.suppress(StoreUnavailable, RedisError, OSError):
            await publish_report(
                self.engine.redis, self.name, self.doc, valid_for_s=3 * self.every_s, board=BOARD
            )

    async def stop(self) -> None:
        """Stop publishing and withdraw the report (a stop on purpose is no outage).

        The publishing task is cancelled until it has ended: a cancellation that lands
        while redis-py reconnects can be lost (:mod:`brokers.engine.background`), and a
        single cancel then left the lifespan's shutdown waiting for ever — the report
        never withdrawn, the process killed by its supervisor and a false "proxy down"
        alert."""
        task, self._task = self._task, None
        await cancel_and_wait(task)
        with contextlib.suppress(StoreUnavailable, RedisError, OSError):
            await withdraw_report(self.engine.redis, self.name, board=BOARD)
