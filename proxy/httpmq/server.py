"""Serving HTTP-MQ: uvicorn (httptools, uvloop) in one or several processes on one port.

Each serving process binds the port itself with ``SO_REUSEPORT`` (as the brokers do), so
the kernel spreads new connections over the processes; the parent of several processes
only starts them (``spawn``: nothing of the parent is inherited), restarts one that dies,
and stops them all on SIGINT/SIGTERM. uvicorn's access log is off: the application logs
requests itself when ``HTTPMQ_ACCESS_LOG`` is set, without query strings (they may carry
a token).

Why uvicorn and not granian: bench/http_mq.py measures both on this application (README
"HTTP-MQ"): uvicorn serves more requests per second and per CPU second here, and its
protocol class can be given what this service needs (:mod:`.protocol`), where granian's
Rust HTTP layer answers a malformed request with a bare status of its own and has no
idle-connection eviction.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import os
import resource
import shutil
import signal
import socket
import tempfile
import time
from multiprocessing.connection import wait
from typing import Any

import uvicorn
from redis.exceptions import RedisError

from brokers.engine import engine_client, how_it_ended, record_exit
from brokers.servers.listening import LISTEN_BACKLOG
from brokers.worker_processes import follow_parent
from proxy.httpmq.app import HttpMqApp
from proxy.httpmq.config import ProxyConfig
from proxy.httpmq.metrics import MULTIPROC_ENV, Metrics
from proxy.httpmq.protocol import protocol_class
from proxy.httpmq.report import service_name

log = logging.getLogger("mqcloud.httpmq")


def listen_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to (host, port) with SO_REUSEPORT, not yet listening."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    sock.set_inheritable(True)
    return sock


def raise_open_files_limit() -> None:
    """Allow as many open files as the hard limit: every connection is one."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def uvicorn_server(config: ProxyConfig, index: int = 0) -> uvicorn.Server:
    """The uvicorn server of serving process ``index``, with this service's protocol and
    application."""
    metrics = Metrics()
    app = HttpMqApp(config, metrics, index)
    settings = uvicorn.Config(
        app,
        loop="proxy.httpmq.accepting_loop:AcceptingLoop",  # accepts a waiting fleet at once
        http=protocol_class(config, metrics),
        ws="none",
        lifespan="on",
        interface="asgi3",
        access_log=False,
        log_config=None,
        proxy_headers=False,  # trusted proxies are the application's call (§3.1)
        server_header=False,
        date_header=True,
        timeout_keep_alive=max(1, round(config.keepalive_timeout)),
        timeout_graceful_shutdown=10,
        backlog=LISTEN_BACKLOG,
    )
    return uvicorn.Server(settings)


STOP_WAIT_S = 15.0
"""A stopping serving process finishes its in-flight requests (uvicorn's graceful shutdown
is 10 s) and withdraws its report; it is killed after this long."""


def serve_process(config: ProxyConfig, index: int = 0, parent: int | None = None) -> None:
    """Run one serving process until SIGINT/SIGTERM (the target of each child). A child
    of the supervisor ``parent`` stops with it, even when it is killed with SIGKILL: a
    serving process left behind would hold the port and keep reporting itself."""
    if parent is not None and not follow_parent(parent, STOP_WAIT_S):
        return  # the supervisor died while it started this process
    logging.basicConfig(
        level=os.environ.get("LOG_LEVEL", "INFO"),
        format=f"%(asctime)s httpmq[{index}] %(levelname)s %(name)s: %(message)s",
    )
    raise_open_files_limit()
    sock = listen_socket(config.host, config.port)
    uvicorn_server(config, index).run(sockets=[sock])


def check_port_free(host: str, port: int) -> None:
    """OSError when anything listens on (host, port) — a bind without SO_REUSEPORT fails
    even against a SO_REUSEPORT group, which another server of the same user could
    otherwise share with us unnoticed."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind((host, port))


def serve(config: ProxyConfig) -> None:
    """Serve ``config.process_count()`` processes on the port until SIGINT/SIGTERM."""
    count = config.process_count()
    check_port_free(config.host, config.port)  # fail here, once, if the port is taken
    if count == 1:
        serve_process(config)
        return
    metrics_dir = tempfile.mkdtemp(prefix="mqcloud-httpmq-metrics-")
    os.environ[MULTIPROC_ENV] = metrics_dir  # the children add up each other's figures
    try:
        Supervisor(config, count).run()
    finally:
        shutil.rmtree(metrics_dir, ignore_errors=True)


class Supervisor:
    """Starts ``count`` serving processes, restarts one that dies, stops them on a signal."""

    RESTART_DELAY = 1.0

    def __init__(self, config: ProxyConfig, count: int) -> None:
        self.config, self.count = config, count
        self.context = multiprocessing.get_context("spawn")
        self.children: dict[int, Any] = {}
        self.stopping = False

    def _start(self, index: int) -> None:
        child = self.context.Process(
            target=serve_process,
            args=(self.config, index, os.getpid()),
            name=f"httpmq-{index}",
        )
        child.start()
        self.children[index] = child

    def _stop(self, signum: int, frame: object) -> None:
        self.stopping = True

    def run(self) -> None:
        """Supervise until SIGINT or SIGTERM, then stop every child gracefully."""
        previous = {sig: signal.signal(sig, self._stop) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            for index in range(self.count):
                self._start(index)
            while not self.stopping:
                wait([c.sentinel for c in self.children.values()], timeout=0.5)
                for index, child in list(self.children.items()):
                    if not child.is_alive() and not self.stopping:
                        log.error(
                            "HTTP-MQ process %d exited (%s); restarting", index, child.exitcode
                        )
                        _mark_dead(child.pid)
                        _record_exit(self.config, index, child.pid, child.exitcode)
                        time.sleep(self.RESTART_DELAY)
                        self._start(index)
        finally:
            for child in self.children.values():
                if child.is_alive():
                    child.terminate()  # SIGTERM: uvicorn finishes in-flight requests
            deadline = time.monotonic() + STOP_WAIT_S
            for child in self.children.values():
                child.join(max(0.1, deadline - time.monotonic()))
                if child.is_alive():
                    child.kill()
                    child.join()
            for sig, handler in previous.items():
                signal.signal(sig, handler)


def _record_exit(config: ProxyConfig, index: int, pid: int | None, code: int | None) -> None:
    """Record a serving process's death for the alerts (:func:`brokers.engine.record_exit`);
    a Redis outage loses only the record."""
    doc = {
        "service": f"HTTP-MQ {service_name(config.port)}",
        "process": index,
        "pid": pid,
        "how": how_it_ended(code if code is not None else 0),
        "at": time.time(),
    }

    async def record() -> None:
        client = engine_client(config.redis_url, socket_timeout=2, socket_connect_timeout=2)
        try:
            await record_exit(client, doc)
        finally:
            await client.aclose()

    with contextlib.suppress(RedisError, OSError):
        asyncio.run(record())


def _mark_dead(pid: int | None) -> None:
    if pid is None:
        return
    from prometheus_client import multiprocess

    with contextlib.suppress(OSError):
        multiprocess.mark_process_dead(pid)
