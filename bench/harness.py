"""What the protocol benchmarks share: a throw-away Redis, its raw XADD baseline, and a
broker server run in its own process (so the load generator does not share its core).

A benchmark script calls :func:`spawn_broker` with its own path; the child re-runs the
script with ``--serve REDIS_PORT PORT``, which the script hands to :func:`serve_broker`
with its catalog snapshot and its protocol's ``start_*_server`` function.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import redis

from brokers.engine import CatalogSnapshot, CatalogWatcher, Engine, publish_snapshot
from brokers.engine.redisio import broker_client
from brokers.servers.runtime import tune_gc

StartServer = Callable[..., Awaitable[Any]]


def free_port() -> int:
    """A free loopback TCP port."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_redis(workdir: Path) -> tuple[subprocess.Popen, int]:
    """A redis-server with AOF (everysec) under ``workdir`` on a free port."""
    port = free_port()
    proc = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", str(workdir),
         "--appendonly", "yes", "--appendfsync", "everysec", "--save", ""],
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return proc, port
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError("redis-server did not start")


def raw_xadd(port: int, requests: int, runs: int = 3) -> float:
    """``redis-benchmark -P 100`` XADD of 100-byte entries: the raw baseline, ops/s.

    The median of ``runs`` runs (each printed): on a small shared machine one run of the
    same command moved by ±15% from the next, which alone decided whether a ratio met its
    target.
    """
    rates = []
    for _ in range(runs):
        out = subprocess.run(
            ["redis-benchmark", "-p", str(port), "-P", "100", "-q", "-n", str(requests),
             "XADD", "bench:raw", "*", "f", "x" * 100],
            capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
        rates.append(float(re.findall(r"([\d.]+) requests per second", out)[-1]))
        clear_raw(port)  # the next run, or what the caller measures next, starts empty
    print("raw XADD runs (median used): " + " / ".join(f"{r:,.0f}" for r in rates), flush=True)
    return statistics.median(rates)


def clear_raw(port: int) -> None:
    """Drop the baseline's stream and compact the AOF, waiting for the rewrite to end.

    Each run starts from the same empty Redis, and what follows a baseline does not carry
    its data: a million 100-byte entries made every later AOF rewrite fork and copy a
    process hundreds of MB larger, on the cores the measured phase runs on.
    """
    client = redis.Redis(port=port)
    try:
        client.delete("bench:raw")
        with contextlib.suppress(redis.ResponseError):  # a rewrite already running
            client.bgrewriteaof()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            info = client.info("persistence")
            if not (info["aof_rewrite_in_progress"] or info["aof_rewrite_scheduled"]):
                break
            time.sleep(0.05)
    finally:
        client.close()


async def serve_broker(
    redis_port: int, port: int, snapshot: CatalogSnapshot, start: StartServer
) -> None:
    """Publish ``snapshot``, run ``start(engine, watcher, host, port, broker_id)`` until
    SIGTERM, then stop it gracefully."""
    client = broker_client(f"redis://127.0.0.1:{redis_port}", max_connections=64)
    await publish_snapshot(client, snapshot)
    watcher = CatalogWatcher(client)
    await watcher.start()
    engine = Engine(client, lambda: watcher.current, broker_id=1)
    server = await start(engine, watcher, "127.0.0.1", port, 1)
    tune_gc()  # as runbroker does
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    print("ready", flush=True)
    await stop.wait()
    await server.stop()
    await engine.close()
    await watcher.stop()
    await client.aclose()
    await client.connection_pool.disconnect()


def cpu_times() -> list[int]:
    """The machine's cumulative CPU times (the ``cpu`` line of /proc/stat; empty elsewhere)."""
    try:
        with open("/proc/stat") as f:
            return [int(v) for v in f.readline().split()[1:]]
    except OSError:
        return []


def steal_share(before: list[int], after: list[int]) -> float:
    """The share of CPU time the hypervisor took from this machine between two
    :func:`cpu_times` (0 where unknown): a run with a large share is not comparable."""
    if len(before) < 8 or len(after) < 8:
        return 0.0
    deltas = [b - a for a, b in zip(before, after, strict=False)]
    total = sum(deltas[:8])
    return deltas[7] / total if total else 0.0


def tree_cpu_seconds(root: int | None = None) -> float:
    """CPU seconds of process ``root`` (default: this one) and all its descendants: the
    live ones' own times plus what every process counts for its reaped children (Linux
    /proc; 0 elsewhere). Spark's JVMs and Python workers and a Redis started by the
    benchmark are all descendants."""
    import os

    try:
        tick = os.sysconf("SC_CLK_TCK")
        parents: dict[int, list[int]] = {}
        times: dict[int, int] = {}
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat") as f:
                    stat = f.read()
            except OSError:
                continue  # gone meanwhile
            fields = stat[stat.rindex(")") + 2 :].split()
            pid = int(entry)
            parents.setdefault(int(fields[1]), []).append(pid)
            times[pid] = sum(int(v) for v in fields[11:15])  # utime stime cutime cstime
    except OSError:
        return 0.0
    start = root or os.getpid()
    total, stack = times.get(start, 0), [start]
    while stack:
        for child in parents.get(stack.pop(), []):
            total += times.get(child, 0)
            stack.append(child)
    return total / tick


def machine_busy(before: list[int], after: list[int]) -> float:
    """Cores the whole machine kept busy between two :func:`cpu_times` (idle and iowait
    excluded), per second of the interval."""
    if len(before) < 5 or len(after) < 5:
        return 0.0
    deltas = [b - a for a, b in zip(before, after, strict=False)]
    total = sum(deltas[:8])
    busy = total - deltas[3] - deltas[4]
    import os

    return (os.cpu_count() or 1) * busy / total if total else 0.0


def spawn_broker(script: str, redis_port: int) -> tuple[subprocess.Popen, int]:
    """Run ``script --serve REDIS_PORT PORT`` and wait for its "ready" line."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, script, "--serve", str(redis_port), str(port)],
        stdout=subprocess.PIPE,
        text=True,
    )
    line = proc.stdout.readline() if proc.stdout else ""
    if line.strip() != "ready":
        proc.kill()
        raise RuntimeError(f"bench broker did not start: {line!r}")
    return proc, port


@contextlib.contextmanager
def broker_bench(script: str, raw_requests: int) -> Iterator[tuple[float, int, int]]:
    """A throw-away Redis, its raw XADD rate measured first (:func:`raw_xadd`), and ``script``'s broker process
    (:func:`spawn_broker`): yields (raw ops/s, Redis port, broker port); on exit both are
    stopped and the Redis directory is removed."""
    workdir = Path(tempfile.mkdtemp(prefix="mqcloud-bench-"))
    redis_proc, redis_port = start_redis(workdir)
    server = None
    try:
        raw = raw_xadd(redis_port, raw_requests)
        server, port = spawn_broker(script, redis_port)
        before = cpu_times()
        yield raw, redis_port, port
        print(f"cpu steal while measuring: {steal_share(before, cpu_times()):.1%}", flush=True)
    finally:
        if server is not None:
            server.terminate()
            server.wait(30)
        redis_proc.terminate()
        redis_proc.wait(10)
        shutil.rmtree(workdir, ignore_errors=True)
