"""What the protocol benchmarks share: a throw-away Redis, its raw XADD baseline, and a
broker server run in its own process (so the load generator does not share its core).

A benchmark script calls :func:`spawn_broker` with its own path; the child re-runs the
script with ``--serve REDIS_PORT PORT [PROCESSES]``, which the script hands to
:func:`run_broker` with its catalog snapshot and its protocol's ``start_*_server`` function.
Like ``runbroker --processes P``, the broker forks P−1 worker processes that listen on the
same port with SO_REUSEPORT (the kernel spreads connections over them).

:func:`profiled` records a broker's processes with py-spy while a phase runs (when
py-spy is on PATH or in ``$PY_SPY``) and :func:`top_frames` summarizes what it recorded.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import redis

from brokers import compiled
from brokers.engine import CatalogSnapshot, CatalogWatcher, Engine, publish_snapshot
from brokers.engine.redisio import broker_client
from brokers.servers.runtime import tune_gc
from brokers.worker_processes import die_with_parent

StartServer = Callable[..., Awaitable[Any]]


def free_port() -> int:
    """A free loopback TCP port."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_redis(workdir: Path, port: int | None = None) -> tuple[subprocess.Popen, int]:
    """A redis-server with AOF (everysec) under ``workdir`` on ``port`` (default: a free one)."""
    port = port or free_port()
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


def timed_calls(fn: Callable[[], object], runs: int) -> tuple[float, object]:
    """(median ms of ``runs`` calls of ``fn``, the last result)."""
    times, result = [], None
    for _ in range(runs):
        started = time.perf_counter()
        result = fn()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times), result


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
    print(compiled.describe(), flush=True)  # the code the brokers of this run execute
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
    redis_port: int,
    port: int,
    snapshot: CatalogSnapshot,
    start: StartServer,
    *,
    reuse_port: bool = False,
    ready: Callable[[], None] | None = None,
) -> None:
    """Publish ``snapshot``, run ``start(engine, watcher, host, port, broker_id)`` until
    SIGTERM, then stop it gracefully. ``ready`` is called once it listens (default: print
    "ready" for :func:`spawn_broker`)."""
    client = broker_client(f"redis://127.0.0.1:{redis_port}", max_connections=64)
    await publish_snapshot(client, snapshot)
    watcher = CatalogWatcher(client)
    await watcher.start()
    engine = Engine(client, lambda: watcher.current, broker_id=1)
    if reuse_port:
        server = await start(engine, watcher, "127.0.0.1", port, 1, reuse_port=True)
    else:
        server = await start(engine, watcher, "127.0.0.1", port, 1)
    tune_gc()  # as runbroker does
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    if ready is None:
        print("ready", flush=True)
    else:
        ready()
    await stop.wait()
    await server.stop()
    await engine.close()
    await watcher.stop()
    await client.aclose()
    await client.connection_pool.disconnect()


def run_broker(
    redis_port: int, port: int, snapshot: CatalogSnapshot, start: StartServer, processes: int = 1
) -> None:
    """The ``--serve`` child: :func:`serve_broker` in ``processes`` processes, as
    ``runbroker --processes`` runs a broker — the first forks the others before its event
    loop starts, all listen on ``port`` with SO_REUSEPORT, and "ready" is printed once
    every one listens. SIGTERM stops them all gracefully."""
    if processes <= 1:
        asyncio.run(serve_broker(redis_port, port, snapshot, start))
        return
    read_end, write_end = os.pipe()
    workers = []
    for _ in range(processes - 1):
        pid = os.fork()
        if pid == 0:  # a worker
            os.close(read_end)
            die_with_parent()
            code = 0
            try:
                asyncio.run(
                    serve_broker(
                        redis_port, port, snapshot, start, reuse_port=True,
                        ready=lambda: os.write(write_end, b"r") and None,
                    )
                )  # fmt: skip
            except BaseException:
                traceback.print_exc()
                code = 1
            finally:
                os._exit(code)
        workers.append(pid)
    os.close(write_end)

    def all_ready() -> None:
        got = 0
        while got < len(workers):
            chunk = os.read(read_end, 64)
            if not chunk:
                raise RuntimeError("a bench broker worker died before it listened")
            got += len(chunk)
        print("ready", flush=True)

    try:
        asyncio.run(
            serve_broker(redis_port, port, snapshot, start, reuse_port=True, ready=all_ready)
        )
    finally:
        for pid in workers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        for pid in workers:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)


def serve_main(
    argv: list[str], snapshot: Callable[[int], CatalogSnapshot], start: StartServer
) -> bool:
    """Handle ``--serve REDIS_PORT PORT [PROCESSES]`` (what :func:`spawn_broker` runs): serve
    and return True; False for any other command line."""
    if len(argv) not in (4, 5) or argv[1] != "--serve":
        return False
    port = int(argv[3])
    processes = int(argv[4]) if len(argv) == 5 else 1
    run_broker(int(argv[2]), port, snapshot(port), start, processes)
    return True


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


def busy_share(before: list[int], after: list[int]) -> float:
    """The share of the machine's CPU time (all cores) that was busy between two
    :func:`cpu_times` — the server, the load generator and Redis together (0 where
    unknown): near 1, a figure says what this machine has to give, not what the server
    could do with more cores."""
    if len(before) < 5 or len(after) < 5:
        return 0.0
    deltas = [b - a for a, b in zip(before, after, strict=False)]
    total = sum(deltas[:8])
    idle = deltas[3] + deltas[4]  # idle, iowait
    return (total - idle) / total if total else 0.0


def redis_calls(port: int) -> dict[str, int]:
    """Redis's own count of each command it ran since it started (``INFO commandstats``:
    a script's ``EVALSHA`` and each command the script ran count alike), by name."""
    with redis.Redis(port=port) as client:
        stats = client.info("commandstats")
    return {key.removeprefix("cmdstat_"): int(v["calls"]) for key, v in stats.items()}


def sent_between(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    """The commands run between two :func:`redis_calls` readings, by name (the first
    reading's own ``INFO``, counted in the second, left out)."""
    sent = {k: n - before.get(k, 0) for k, n in after.items()}
    sent["info"] = sent.get("info", 1) - 1
    return {k: n for k, n in sent.items() if n > 0}


def calls_between(before: dict[str, int], after: dict[str, int]) -> tuple[int, int]:
    """(every Redis command, scripts) run between two :func:`redis_calls` readings."""
    sent = sent_between(before, after)
    return sum(sent.values()), sent.get("evalsha", 0) + sent.get("eval", 0)


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


def rss_bytes(pid: int) -> int:
    """The resident memory of process ``pid`` (Linux /proc; 0 elsewhere or once gone)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


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


def spawn_broker(
    script: str, redis_port: int, processes: int = 1, *, source: bool = False
) -> tuple[subprocess.Popen, int]:
    """Run ``script --serve REDIS_PORT PORT PROCESSES`` and wait for its "ready" line;
    ``source``: with the hot path run from source, not its compiled build."""
    port = free_port()
    env = {**os.environ, compiled.PURE_PYTHON_ENV: "1"} if source else None
    proc = subprocess.Popen(
        [sys.executable, script, "--serve", str(redis_port), str(port), str(processes)],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    line = proc.stdout.readline() if proc.stdout else ""
    if line.strip() != "ready":
        proc.kill()
        raise RuntimeError(f"bench broker did not start: {line!r}")
    return proc, port


def stop_process(proc: subprocess.Popen, timeout: float = 30) -> None:
    """SIGTERM ``proc`` (a graceful stop), SIGKILL if it has not ended after ``timeout``."""
    proc.terminate()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@contextlib.contextmanager
def django_services(baseline_requests: int = 200_000) -> Iterator[None]:
    """A throw-away PostgreSQL and Redis (``scripts/localservices``) on free ports, for a
    benchmark that runs Django in process: prints this run's raw Redis baseline
    (:func:`raw_xadd`), exports ``DATABASE_URL`` and ``REDIS_URL``, and stops both and
    removes their directory on exit."""
    scripts = str(Path(__file__).resolve().parent.parent / "scripts")
    if scripts not in sys.path:
        sys.path.insert(0, scripts)
    from localservices import temporary_services

    with temporary_services("mqcloud-bench-") as (postgres, redis_local):
        raw = raw_xadd(redis_local.port, baseline_requests)
        print(f"raw redis-benchmark -P 100 XADD: {raw:,.0f} ops/s (median, same run)", flush=True)
        os.environ.update(DATABASE_URL=postgres.url, REDIS_URL=redis_local.url)
        yield


def django_ready() -> None:
    """Django set up in this process on the services of :func:`django_services` (the
    project's settings), its database migrated: what a benchmark of console or alert
    code does before it builds its fleet."""
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mqcloud.settings")
    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


@contextlib.contextmanager
def redis_server() -> Iterator[int]:
    """A throw-away redis-server (:class:`RestartableRedis`): yields its port; stopped and
    its directory removed on exit."""
    with contextlib.closing(RestartableRedis()) as redis:
        yield redis.port


class RestartableRedis:
    """A throw-away redis-server (:func:`start_redis`) that can be killed and started again
    on the same port and data, as a Redis outage does to a broker."""

    def __init__(self) -> None:
        self.workdir = Path(tempfile.mkdtemp(prefix="mqcloud-bench-"))
        self.proc, self.port = start_redis(self.workdir)

    def outage(self, seconds: float) -> None:
        """kill -9, ``seconds`` down, started again (blocks meanwhile)."""
        self.proc.kill()
        self.proc.wait(10)
        time.sleep(seconds)
        self.proc, _ = start_redis(self.workdir, self.port)

    def close(self) -> None:
        """Stop it and remove its directory."""
        self.proc.terminate()
        self.proc.wait(10)
        shutil.rmtree(self.workdir, ignore_errors=True)


@contextlib.contextmanager
def broker(
    script: str, redis_port: int, processes: int = 1, *, source: bool = False
) -> Iterator[tuple[int, int]]:
    """``script``'s broker (:func:`spawn_broker`) on ``redis_port``: yields (port, pid of
    its first process); stopped gracefully on exit."""
    proc, port = spawn_broker(script, redis_port, processes, source=source)
    try:
        yield port, proc.pid
    finally:
        stop_process(proc)


@contextlib.contextmanager
def broker_bench(
    script: str, raw_requests: int, processes: int = 1
) -> Iterator[tuple[float, int, int, int]]:
    """A throw-away Redis, its raw XADD rate measured first (:func:`raw_xadd`), and ``script``'s broker
    (:func:`spawn_broker`, ``processes`` processes): yields (raw ops/s, Redis port, broker
    port, broker pid); on exit both are stopped and the Redis directory is removed."""
    with redis_server() as redis_port:
        raw = raw_xadd(redis_port, raw_requests)
        with broker(script, redis_port, processes) as (port, pid):
            before = cpu_times()
            yield raw, redis_port, port, pid
            print(f"cpu steal while measuring: {steal_share(before, cpu_times()):.1%}", flush=True)


# ---------------------------------------------------------------- profiling


def py_spy() -> str | None:
    """The py-spy executable ($PY_SPY, else on PATH), or None."""
    found = os.environ.get("PY_SPY") or shutil.which("py-spy")
    return found if found and os.access(found, os.X_OK) else None


@contextlib.contextmanager
def profiled(pid: int, out: Path | None, *, rate: int = 200) -> Iterator[None]:
    """Record ``pid`` and its children with ``py-spy record`` (collapsed stacks, idle time
    left out) into ``out`` while the block runs; nothing when ``out`` is None or py-spy
    is missing."""
    exe = py_spy() if out is not None else None
    if exe is None or out is None:
        yield
        return
    out.parent.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(
        [exe, "record", "--pid", str(pid), "--subprocesses", "--rate", str(rate),
         "--format", "raw", "--output", str(out), "--nonblocking"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    time.sleep(1.0)  # py-spy attaches before the load starts
    try:
        yield
    finally:
        proc.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def top_frames(path: Path, top: int = 12) -> str:
    """The frames that take the most samples of a py-spy raw (collapsed) profile: by own
    time (the leaf frame) and by total time (anywhere on the stack), as text."""
    own: collections.Counter[str] = collections.Counter()
    total: collections.Counter[str] = collections.Counter()
    samples = 0
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return f"(no profile at {path})"
    for raw_line in lines:
        stack, _, count = raw_line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        frames = [_short(f) for f in stack.split(";") if not f.startswith("process ")]
        if not frames:
            continue
        samples += n
        own[frames[-1]] += n
        for frame in set(frames):
            total[frame] += n
    if not samples:
        return f"(empty profile at {path})"
    out = [f"{samples} samples; own time:"]
    out += [f"  {n / samples:6.1%}  {f}" for f, n in own.most_common(top)]
    out.append("  total time (frame anywhere on the stack), project code only:")
    mine = [(f, n) for f, n in total.most_common() if "brokers/" in f][:top]
    out += [f"  {n / samples:6.1%}  {f}" for f, n in mine]
    return "\n".join(out)


def _short(frame: str) -> str:
    """``func (path/to/file.py:12)`` with the path cut to its project or library part."""
    frame = re.sub(r":\d+\)$", ")", frame)  # one entry per function, not per line
    for marker in ("/brokers/", "/site-packages/", "/lib/python3"):
        i = frame.find(marker)
        if i >= 0:
            j = frame.rfind("(", 0, i)
            return frame[: j + 1] + frame[i + 1 :]
    return frame
