"""Real broker processes (``manage.py runbroker``) on a Redis the test owns.

The catalog lives in the test database (the test must use ``transaction=True`` so the
processes see it); each broker's output goes to its own log file, kept across restarts.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from django.conf import settings as django_settings

from brokers.clients.jmq4 import Jmq4Client
from tests.scripts_path import wait_for_port

ROOT = Path(__file__).resolve().parents[2]


def database_url() -> str:
    db = django_settings.DATABASES["default"]
    return f"postgres://{db['USER']}:{db['PASSWORD']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"


class BrokerProcesses:
    """Start, kill and stop broker processes by id."""

    def __init__(self, redis_url: str, log_dir: Path, **env: str) -> None:
        self.env = {
            **os.environ,
            "DATABASE_URL": database_url(),
            "REDIS_URL": redis_url,
            "BROKER_HEARTBEAT_SECONDS": "0.5",
            "LOG_LEVEL": "INFO",
            **env,
        }
        self.log_dir = log_dir
        self.procs: dict[int, subprocess.Popen] = {}

    def log_path(self, broker_id: int) -> Path:
        return self.log_dir / f"broker{broker_id}.log"

    def log(self, broker_id: int) -> str:
        return self.log_path(broker_id).read_text(errors="replace")

    def start(self, broker_id: int, port: int | None = None, timeout: float = 30) -> None:
        """Start broker ``broker_id``; with ``port``, wait until it listens there."""
        with self.log_path(broker_id).open("a") as out:
            self.procs[broker_id] = subprocess.Popen(
                [sys.executable, "manage.py", "runbroker", "--broker-id", str(broker_id)],
                cwd=ROOT,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        if port is not None:
            wait_for_port(port, timeout=timeout)

    def pid(self, broker_id: int) -> int:
        return self.procs[broker_id].pid

    def kill(self, broker_id: int) -> None:
        """kill -9."""
        proc = self.procs[broker_id]
        proc.send_signal(signal.SIGKILL)
        proc.wait()

    def kill_tree(self, broker_id: int) -> None:
        """kill -9 of the broker and its worker processes at once (a lost machine): no
        worker outlives the parent to stop gracefully."""
        kill_tree(self.procs[broker_id])

    def alive(self, broker_id: int) -> bool:
        return self.procs[broker_id].poll() is None

    def stop_all(self) -> dict[int, int]:
        """SIGTERM every running broker and wait; their exit codes."""
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        codes = {}
        deadline = time.monotonic() + 30
        for bid, proc in self.procs.items():
            try:
                codes[bid] = proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                codes[bid] = proc.wait()
        return codes


def kill_tree(proc: subprocess.Popen) -> None:
    """kill -9 of ``proc`` and its children at once: no ``runbroker`` worker outlives its
    parent to stop gracefully (and keep the port a moment longer)."""
    try:
        with open(f"/proc/{proc.pid}/task/{proc.pid}/children") as f:
            children = [int(pid) for pid in f.read().split()]
    except OSError:
        children = []
    for pid in children:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    proc.send_signal(signal.SIGKILL)
    proc.wait()


async def round_trip(port: int, token: str, body: bytes) -> list[bytes]:
    """Over JMQ4 as app1 (:func:`tests.jmq4.conftest.build_catalog`): produce ``body`` to
    `local` partition 0, then fetch and ack what comes."""
    async with Jmq4Client("127.0.0.1", port, app="app1", token=token, timeout=5) as client:
        await client.produce("local", [body], partition=0)
        got = await client.fetch("local", count=10, long_poll_ms=2000)
        await client.ack(got)
        return [m.body for m in got]
