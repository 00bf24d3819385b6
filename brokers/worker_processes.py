"""The worker processes of ``runbroker --processes P``, started and kept running by the
broker's first process.

Each worker is ``manage.py runbroker --broker-id N --worker K --worker-of <pid>
--worker-ports J,Z,V``: a fresh process that serves the ports the first process read from
the broker's row (so it starts without the database) beside it with SO_REUSEPORT. The first process checks them every heartbeat: a worker that exited
(killed by the OOM killer, a crash) is logged and started again, at once the first time and
after a back-off growing to :data:`MAX_BACKOFF_S` while it keeps dying within
:data:`STABLE_AFTER_S` of its start — so the broker gets its core back, and a worker that
cannot start does not spin. A worker gets SIGTERM (a graceful stop) when the first process
dies, even by SIGKILL, and stops at once if that happened before it could ask for that.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from brokers.engine import how_it_ended

log = logging.getLogger("mqcloud.broker")

STABLE_AFTER_S = 10.0
"""A worker up this long counts as started: its next exit is restarted at once."""
MAX_BACKOFF_S = 30.0
STOP_WAIT_S = 30.0
"""A stopping worker finishes its in-flight requests; SIGKILL after this long."""
MANAGE_PY = Path(__file__).resolve().parents[1] / "manage.py"


@dataclass
class Worker:
    """One worker slot: its process (None while waiting to be started again)."""

    number: int
    process: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    failures: int = 0
    """Exits in a row within STABLE_AFTER_S of a start."""
    start_after: float = 0.0


@dataclass
class WorkerProcesses:
    """The workers of broker ``broker_id``, serving on ``bind``."""

    broker_id: int
    count: int
    bind: str
    ports: dict[str, int | None] = field(default_factory=dict)
    """The ports they serve (``jmq4_port``, ``zbus_port``, ``vibemq_port``), from the
    broker's row as the first process read it: a worker starts without the database."""
    workers: list[Worker] = field(default_factory=list)

    def command(self, number: int) -> list[str]:
        return [
            sys.executable,
            str(MANAGE_PY),
            "runbroker",
            "--broker-id",
            str(self.broker_id),
            "--bind",
            self.bind,
            "--worker",
            str(number),
            "--worker-of",
            str(os.getpid()),
            "--worker-ports",
            format_ports(self.ports),
        ]

    def start(self) -> None:
        """Start every worker."""
        self.workers = [Worker(n) for n in range(1, self.count + 1)]
        for worker in self.workers:
            self._spawn(worker)
        if self.workers:
            log.info(
                "broker %s: %d worker processes %s",
                self.broker_id,
                self.count,
                self.pids(),
            )

    def _spawn(self, worker: Worker) -> None:
        try:
            worker.process = subprocess.Popen(self.command(worker.number))
        except OSError as exc:  # out of processes or memory: the next check tries again
            log.error("broker %s: worker %s not started: %s", self.broker_id, worker.number, exc)
            worker.process = None
            worker.failures += 1
            worker.start_after = time.monotonic() + self._backoff(worker)
            return
        worker.started_at = time.monotonic()

    def _backoff(self, worker: Worker) -> float:
        return 0.0 if worker.failures <= 1 else min(MAX_BACKOFF_S, 2.0 ** (worker.failures - 1))

    def supervise(self) -> list[dict[str, object]]:
        """Start again the workers that exited (called every heartbeat); what ended, for
        the record (:func:`brokers.engine.record_exit`)."""
        now = time.monotonic()
        ended: list[dict[str, object]] = []
        for worker in self.workers:
            proc = worker.process
            if proc is not None:
                code = proc.poll()
                if code is None:
                    if now - worker.started_at >= STABLE_AFTER_S:
                        worker.failures = 0
                    continue
                worker.process = None
                worker.failures = (
                    worker.failures + 1 if now - worker.started_at < STABLE_AFTER_S else 1
                )
                worker.start_after = now + self._backoff(worker)
                log.warning(
                    "broker %s: worker %s (pid %s) %s; starting it again%s",
                    self.broker_id,
                    worker.number,
                    proc.pid,
                    how_it_ended(code),
                    f" in {worker.start_after - now:.0f} s" if worker.start_after > now else "",
                )
                ended.append(
                    {
                        "service": f"broker {self.broker_id}",
                        "process": worker.number,
                        "pid": proc.pid,
                        "how": how_it_ended(code),
                        "at": time.time(),
                        "failures_in_a_row": worker.failures,
                    }
                )
            if now >= worker.start_after:
                self._spawn(worker)
                if worker.process is not None:
                    log.warning(
                        "broker %s: worker %s started again (pid %s)",
                        self.broker_id,
                        worker.number,
                        worker.process.pid,
                    )
        return ended

    def pids(self) -> list[int]:
        return [w.process.pid for w in self.workers if w.process is not None]

    def stop(self) -> None:
        """Stop every worker gracefully (SIGTERM) and wait; SIGKILL after STOP_WAIT_S."""
        running = [w.process for w in self.workers if w.process is not None]
        for proc in running:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_WAIT_S
        for proc in running:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.warning("broker %s: worker pid %s killed after %.0f s", self.broker_id,
                            proc.pid, STOP_WAIT_S)  # fmt: skip
                proc.kill()
                proc.wait()
        for worker in self.workers:
            worker.process = None


PORT_NAMES = ("jmq4_port", "zbus_port", "vibemq_port")


def format_ports(ports: dict[str, int | None]) -> str:
    """``jmq4,zbus,vibemq`` (``-`` for a protocol not served), as a worker is told them."""
    return ",".join(str(ports[n]) if ports.get(n) is not None else "-" for n in PORT_NAMES)


def parse_ports(text: str) -> dict[str, int | None]:
    """The ports of :func:`format_ports`; ValueError for anything else."""
    values = text.split(",")
    if len(values) != len(PORT_NAMES):
        raise ValueError(f"expected {len(PORT_NAMES)} ports, got {text!r}")
    ports: dict[str, int | None] = {}
    for name, value in zip(PORT_NAMES, values, strict=True):
        if value == "-":
            ports[name] = None
        elif value.isdigit() and 0 < int(value) < 65536:
            ports[name] = int(value)
        else:
            raise ValueError(f"not a port: {value!r}")
    return ports


def die_with_parent() -> bool:
    """Get SIGTERM (a graceful stop) when the parent process dies, even by SIGKILL; False
    when the system would not arrange it."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        if libc.prctl(1, signal.SIGTERM) == 0:  # PR_SET_PDEATHSIG
            return True
        log.warning("PR_SET_PDEATHSIG failed: %s", os.strerror(ctypes.get_errno()))
    except (OSError, AttributeError):  # not Linux: the parent's stop still reaches it
        log.debug("PR_SET_PDEATHSIG unavailable")
    return False


ORPHAN_CHECK_S = 0.5
"""How often a worker's watch looks whether its parent is still there."""


def follow_parent(parent: int, stop_within_s: float = STOP_WAIT_S) -> bool:
    """In a worker: get SIGTERM when the first process ``parent`` dies; False when it is
    already gone (the worker was started by a process that died meanwhile).

    A watch thread (:func:`watch_parent`) backs the signal up: a worker whose parent is
    gone and that is still running ``stop_within_s`` later exits at once. A worker left
    behind would hold the ports and keep reporting itself with no one supervising it."""
    signalled = die_with_parent()
    if os.getppid() != parent:
        return False
    threading.Thread(
        target=watch_parent,
        args=(parent, stop_within_s),
        kwargs={"ask_first": not signalled},
        name="parent-watch",
        daemon=True,
    ).start()
    return True


def _terminate_self() -> None:
    os.kill(os.getpid(), signal.SIGTERM)


def watch_parent(
    parent: int,
    stop_within_s: float,
    *,
    ask_first: bool = False,
    every_s: float = ORPHAN_CHECK_S,
    exit_now: Callable[[int], object] = os._exit,
    ask_to_stop: Callable[[], object] = _terminate_self,
) -> None:
    """Until ``parent`` is no longer this process's parent; then give the graceful stop
    that the parent-death SIGTERM began ``stop_within_s`` and end the process with status
    1. ``ask_first``: no such signal was arranged, so SIGTERM is sent from here first."""
    while os.getppid() == parent:
        time.sleep(every_s)
    if ask_first:
        log.warning("worker %s: parent %s is gone: stopping", os.getpid(), parent)
        ask_to_stop()
    time.sleep(stop_within_s)
    log.error(
        "worker %s: still running %.0f s after its parent %s died: exiting",
        os.getpid(),
        stop_within_s,
        parent,
    )
    logging.shutdown()
    exit_now(1)
