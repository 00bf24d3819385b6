"""Benchmark of the HTTP-MQ service: requests per second per process, and latency at a
fixed rate, under uvicorn (what ``runproxy`` serves with) and granian (for comparison).

Starts its own redis-server (AOF, appendfsync everysec) on a free loopback port, measures
the raw baseline (``redis-benchmark`` pipelined XADD, median of three), publishes a catalog
snapshot straight to Redis (no PostgreSQL needed), then, for each server, starts one
serving process of the service (``--serve``) and measures:

- single produce req/s: wrk, 16 connections, one 100-byte message per request;
- batch produce: wrk, 16 connections, 32 messages per request (messages/s = req/s × 32);
- fetch+ack req/s: wrk, 8 connections, each fetch acking the previous batch (requestId),
  from the backlog the produce runs left (full batches of 32; messages per fetch printed);
- produce latency at a fixed 2,000 req/s: an open-loop generator (raw asyncio sockets,
  not the project's client) in its own process, latency from each request's scheduled
  time, so a stall is not hidden by fewer requests being sent.

wrk is a C load generator (Debian package ``wrk``); without it the req/s lines are skipped
with a note. Every figure is printed with its ratio to the raw baseline, and the share of
CPU time stolen by the hypervisor while measuring, the server's CPU time per request
(what a dedicated core would serve) and the share of time it waited, runnable, for a CPU
that other work on the machine held (next to which latency figures must be read). Usage:
``.venv/bin/python bench/http_mq.py [--seconds 8] [--servers uvicorn,granian]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import quote

import orjson
import redis.asyncio as aioredis

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.harness import cpu_times, free_port, raw_xadd, start_redis, steal_share  # noqa: E402
from brokers.engine import (  # noqa: E402
    AppInfo,
    BrokerInfo,
    CatalogSnapshot,
    ConsumerPolicyInfo,
    PartitionGroupInfo,
    ProducerPolicyInfo,
    TopicInfo,
    hash_token,
    publish_snapshot,
)
from brokers.engine.keys import PartitionKeys  # noqa: E402

TOKEN = "bench-token"
BODY = "x" * 100
AUTH = f"Bearer {TOKEN}"
FORM = "application/x-www-form-urlencoded"


SERVERS = ("uvicorn", "granian")
PARTITIONS = 8


def reader(server: str) -> tuple[str, str]:
    """(consumer, token) of the consumer group ``server``'s fetch run uses: each server
    gets its own, so the locks one run leaves (until their ack timeout) do not fall on the
    next."""
    return f"c-{server}", f"{server}-reader-token"


def snapshot() -> CatalogSnapshot:
    """One topic of 8 partitions, its producer ``p`` and a consumer per server (32 per
    fetch, each of its own app)."""
    broker = BrokerInfo(id=1, host="127.0.0.1", jmq4_port=1, zbus_port=2, vibemq_port=3)
    topic = TopicInfo(
        code="bench",
        partitions=PARTITIONS,
        groups=(PartitionGroupInfo(group_id=0, leader=1, partitions=tuple(range(8))),),
    )
    apps = {"bench-app": AppInfo(code="bench-app", token_hashes=(hash_token(TOKEN),))}
    consumers = []
    for server in SERVERS:
        name, token = reader(server)
        apps[f"{server}-reader"] = AppInfo(
            code=f"{server}-reader", token_hashes=(hash_token(token),)
        )
        consumers.append(
            ConsumerPolicyInfo(
                name=name,
                topic="bench",
                app=f"{server}-reader",
                http_enabled=True,
                start_position="earliest",
                batch_size=32,
            )
        )
    return CatalogSnapshot(
        version=1,
        brokers={1: broker},
        topics={"bench": topic},
        apps=apps,
        producers=(
            ProducerPolicyInfo(name="p", topic="bench", app="bench-app", http_enabled=True),
        ),
        consumers=tuple(consumers),
    )


# ---------------------------------------------------------------------- the served process


def granian_app():
    """The service's ASGI application for granian (``factory=True``), from the env."""
    from proxy.httpmq.app import HttpMqApp
    from proxy.httpmq.config import ProxyConfig

    return HttpMqApp(ProxyConfig.from_env())


def serve(server: str, redis_port: int, port: int) -> None:
    """Run one serving process of the service under ``server`` until SIGTERM."""
    os.environ["REDIS_URL"] = f"redis://127.0.0.1:{redis_port}"
    if server == "uvicorn":
        from proxy.httpmq.config import ProxyConfig
        from proxy.httpmq.server import serve as serve_uvicorn

        serve_uvicorn(ProxyConfig.from_env(port=port, processes=1))
        return
    from granian import Granian
    from granian.constants import HTTPModes, Interfaces, Loops

    Granian(
        "bench.http_mq:granian_app",
        address="127.0.0.1",
        port=port,
        interface=Interfaces.ASGI,
        workers=1,
        loop=Loops.uvloop,
        http=HTTPModes.http1,
        websockets=False,
        log_access=False,
        factory=True,
        working_dir=ROOT,
    ).serve()


def spawn_server(server: str, redis_port: int) -> tuple[subprocess.Popen, int]:
    """``server``'s serving process, once it answers /healthz."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, __file__, "--serve", server, str(redis_port), str(port)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            if b" 200 " in _get(port, "/healthz"):
                return proc, port
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"{server} did not start")


def _get(port: int, path: str) -> bytes:
    import socket

    with socket.create_connection(("127.0.0.1", port), timeout=2) as sock:
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        return sock.recv(65536)


# ---------------------------------------------------------------------- wrk


PRODUCE_LUA = """
wrk.method = "POST"
wrk.body = "{body}"
wrk.headers["Content-Type"] = "{form}"
wrk.headers["Authorization"] = "{auth}"
"""

FETCH_LUA = """
local threads = {{}}
function setup(thread) table.insert(threads, thread) end
local rid = nil
local messages = 0
request = function()
  local path = "/mq/message?topic=bench&consumer={consumer}"
  if rid then path = path .. "&requestId=" .. rid end
  return wrk.format("GET", path, {{["Authorization"] = "{auth}"}})
end
response = function(status, headers, body)
  rid = string.match(body, '"requestId":"([^"]+)"')
  if rid then rid = string.gsub(rid, "=", "%%3D") end
  local n = string.match(body, '"msgListSize":(%d+)')
  if n then messages = messages + tonumber(n); wrk.thread:set("messages", messages) end
end
function done(summary, latency, requests)
  local total = 0
  for _, t in ipairs(threads) do total = total + (t:get("messages") or 0) end
  io.write(string.format("messages: %d\\n", total))
end
"""


def wrk(url: str, script: str, connections: int, threads: int, seconds: float) -> dict:
    """Run wrk with a Lua script; requests/s, latency percentiles and non-2xx count."""
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as f:
        f.write(script)
    try:
        out = subprocess.run(
            ["wrk", f"-t{threads}", f"-c{connections}", f"-d{max(1, round(seconds))}s", "--latency",
             "-s", f.name, url],
            capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
    finally:
        os.unlink(f.name)
    rate = float(re.search(r"Requests/sec:\s+([\d.]+)", out)[1])
    count = int(re.search(r"(\d+) requests in", out)[1])
    bad = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    p99 = re.search(r"99%\s+([\d.]+)(us|ms|s)", out)
    messages = re.search(r"messages: (\d+)", out)
    scale = {"us": 0.001, "ms": 1.0, "s": 1000.0}
    return {
        "rate": rate,
        "count": count,
        "non2xx": int(bad[1]) if bad else 0,
        "p99_ms": float(p99[1]) * scale[p99[2]] if p99 else float("nan"),
        "messages": int(messages[1]) if messages else None,
    }


# ---------------------------------------------------------------------- fixed-rate latency


async def fixed_rate(port: int, rate: float, seconds: float, connections: int) -> list[float]:
    """Produce at ``rate`` req/s over keep-alive connections; each request's latency (ms)
    from the time it was due to be sent."""
    import uvloop  # noqa: F401 - the loop is chosen by the caller

    body = f"producer=p&message={BODY}".encode()
    request = (
        f"POST /mq/produce HTTP/1.1\r\nHost: bench\r\nAuthorization: {AUTH}\r\n"
        f"Content-Type: {FORM}\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode() + body
    due: asyncio.Queue[float | None] = asyncio.Queue()
    latencies: list[float] = []
    errors = 0

    async def connection() -> None:
        nonlocal errors
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        while (when := await due.get()) is not None:
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            length = int(re.search(rb"content-length: (\d+)", head, re.I)[1])
            await reader.readexactly(length)
            latencies.append((time.perf_counter() - when) * 1000)
            errors += not head.startswith(b"HTTP/1.1 200")
        writer.close()

    workers = [asyncio.create_task(connection()) for _ in range(connections)]
    start = time.perf_counter() + 0.2
    total = int(rate * seconds)
    for i in range(total):
        when = start + i / rate
        delay = when - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        due.put_nowait(when)
    for _ in workers:
        due.put_nowait(None)
    await asyncio.gather(*workers)
    if errors:
        print(f"  ({errors} fixed-rate requests were not 200)")
    return latencies


def latency_run(port: int, rate: float, seconds: float) -> list[float]:
    """:func:`fixed_rate` in a process of its own (the generator gets its own core)."""
    out = subprocess.run(
        [sys.executable, __file__, "--fixed-rate", str(port), str(rate), str(seconds)],
        capture_output=True, text=True, check=True, cwd=ROOT,
    ).stdout  # fmt: skip
    return orjson.loads(out.strip().splitlines()[-1])


def process_times(pid: int) -> tuple[float, float]:
    """(CPU seconds used, seconds spent runnable but waiting for a CPU) so far, summed
    over a process, its threads and its descendants (Linux /proc; granian serves from a
    child process with threads of its own). The wait is what other work on the machine
    costs the server: on a shared machine it, not the server, can decide latency."""
    cpu = wait = 0
    pending = [pid]
    while pending:
        current = pending.pop()
        with contextlib.suppress(OSError):
            for task in os.listdir(f"/proc/{current}/task"):
                with open(f"/proc/{current}/task/{task}/schedstat") as f:
                    used, waited, _ = (int(v) for v in f.read().split())
                cpu, wait = cpu + used, wait + waited
                with open(f"/proc/{current}/task/{task}/children") as f:
                    pending += [int(child) for child in f.read().split()]
    return cpu / 1e9, wait / 1e9


FETCH_HEADROOM = 6_000
"""Fetches per second the backlog before a fetch+ack run is sized for: twice the target,
and above what one process does here, so no fetch of the run finds less than a full
batch (an empty fetch is cheaper, and would flatter the figure)."""


def stored_messages(redis_port: int) -> int:
    """Messages stored in the bench topic: a new reader's backlog."""
    import redis

    client = redis.Redis(port=redis_port)
    try:
        nexts = [client.hget(PartitionKeys("bench", p).meta, "next") for p in range(PARTITIONS)]
    finally:
        client.close()
    return sum(int(n or 0) for n in nexts)


def top_up(redis_port: int, url: str, batch: str, seconds: float) -> None:
    """Produce batches (not measured) until a new reader's backlog lasts the fetch run."""
    want = round(seconds * FETCH_HEADROOM * 32)
    have = stored_messages(redis_port)
    while have < want:
        wrk(url + "/mq/produce/batch", batch, 16, 1, 2)
        have = stored_messages(redis_port)
    print(f"backlog before the fetch run: {have:,} messages (sized for {want:,})", flush=True)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


# ---------------------------------------------------------------------- the run


def measure(server: str, redis_port: int, seconds: float, raw: float) -> dict[str, float]:
    """Every figure for one server; printed as they come."""
    proc, port = spawn_server(server, redis_port)
    url = f"http://127.0.0.1:{port}"
    figures: dict[str, float] = {}
    before = cpu_times()
    try:
        if shutil.which("wrk"):
            single = PRODUCE_LUA.format(body=f"producer=p&message={BODY}", form=FORM, auth=AUTH)
            batch_json = orjson.dumps([BODY] * 32).decode()
            batch = PRODUCE_LUA.format(
                body=f"producer=p&messages={quote(batch_json)}", form=FORM, auth=AUTH
            )
            consumer, token = reader(server)
            fetch_lua = FETCH_LUA.format(consumer=consumer, auth=f"Bearer {token}")
            runs = [
                ("produce single req/s (16 conns)", "/mq/produce", single, 16, 1, 1),
                ("produce batch=32 msg/s (16 conns)", "/mq/produce/batch", batch, 16, 1, 32),
                ("fetch+ack req/s (8 clients)", "/", fetch_lua, 8, 8, 1),
            ]
            for name, path, script, conns, threads, per_request in runs:
                if path == "/":
                    top_up(redis_port, url, batch, seconds)
                cpu, wait = process_times(proc.pid)
                started = time.monotonic()
                r = wrk(url + path, script, conns, threads, seconds)
                cpu_after, wait_after = process_times(proc.pid)
                r["cpu_us"] = (cpu_after - cpu) / r["count"] * 1e6
                r["wait"] = (wait_after - wait) / (time.monotonic() - started)
                figures[name] = r["rate"] * per_request
                _line(server, name, r["rate"] * per_request, raw, r)
        else:
            print("wrk is not installed (apt-get install -y wrk): req/s figures skipped")
        cpu, wait = process_times(proc.pid)
        started = time.monotonic()
        lat = latency_run(port, 2000, seconds)
        waited = (process_times(proc.pid)[1] - wait) / (time.monotonic() - started)
        figures["produce p50 ms @2000/s"] = percentile(lat, 0.50)
        figures["produce p99 ms @2000/s"] = percentile(lat, 0.99)
        print(
            f"{server:<8} produce at 2,000 req/s ({len(lat):,} requests): "
            f"p50 {percentile(lat, 0.5):.2f} ms  p99 {percentile(lat, 0.99):.2f} ms  "
            f"p99.9 {percentile(lat, 0.999):.2f} ms  max {max(lat):.2f} ms  "
            f"(server waited for a CPU {waited:.0%} of the time)",
            flush=True,
        )
    finally:
        proc.terminate()
        proc.wait(30)
        print(f"{server:<8} cpu steal while measuring: {steal_share(before, cpu_times()):.1%}")
    return figures


def _line(server: str, name: str, value: float, raw: float, r: dict) -> None:
    note = f"  ({r['non2xx']} non-2xx)" if r["non2xx"] else ""
    if r["messages"] is not None:
        note += f"  {r['messages'] / r['count']:.1f} messages per fetch"
    print(
        f"{server:<8} {name:<36} {value:>10,.0f}  ratio={value / raw:.4f}"
        f"  wrk p99 {r['p99_ms']:.1f} ms  server CPU {r['cpu_us']:.0f} us/request"
        f" (~{1e6 / r['cpu_us']:,.0f} req/s per core), waited for a CPU {r['wait']:.0%}{note}",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--servers", default="uvicorn,granian")
    parser.add_argument("--serve", nargs=3, metavar=("SERVER", "REDIS_PORT", "PORT"))
    parser.add_argument("--fixed-rate", nargs=3, metavar=("PORT", "RATE", "SECONDS"))
    args = parser.parse_args()
    if args.serve:
        serve(args.serve[0], int(args.serve[1]), int(args.serve[2]))
        return
    if args.fixed_rate:
        import uvloop

        port, rate, seconds = args.fixed_rate
        lat = uvloop.run(fixed_rate(int(port), float(rate), float(seconds), 16))
        print(orjson.dumps(lat).decode())
        return
    servers = [s for s in args.servers.split(",") if s]
    if "granian" in servers and importlib.util.find_spec("granian") is None:
        print("granian is not installed (.venv/bin/pip install granian): measuring uvicorn only")
        servers.remove("granian")
    workdir = Path(tempfile.mkdtemp(prefix="mqcloud-bench-"))
    redis_proc, redis_port = start_redis(workdir)
    try:
        raw = raw_xadd(redis_port, 200_000)
        print(f"raw redis XADD pipelined (-P 100)  {raw:,.0f} ops/s  ratio=1.00", flush=True)

        async def seed() -> None:
            client = aioredis.from_url(f"redis://127.0.0.1:{redis_port}")
            await publish_snapshot(client, snapshot())
            await client.aclose()

        asyncio.run(seed())
        results = {server: measure(server, redis_port, args.seconds, raw) for server in servers}
        if len(results) == 2:
            a, b = results["uvicorn"], results["granian"]
            print("granian / uvicorn: " + ", ".join(
                f"{name} {b[name] / a[name]:.2f}" for name in a if name in b and a[name]
            ))  # fmt: skip
        print(
            "targets per process: single >= 5,000 req/s, batch >= 50,000 msg/s, "
            "fetch+ack >= 3,000 req/s, p99 < 10 ms at 2,000 req/s"
        )
    finally:
        redis_proc.terminate()
        redis_proc.wait(10)
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
