"""Wake-ups across broker processes (a script, not a test):
``python bench/wakeups.py [--processes 1,2,4] [--seconds 4] [--no-java]``.

A queue consumed one message at a time by consumers spread over a broker's processes
(RPC services, long pollers) is where processes cost the most: every append's
notification reaches every process with a waiting consumer. Appends claim what a parked
consumer of their own process will take (``brokers/engine/notify.py``), so the other
processes are not woken for it. This prints, for our zbus server on each process count
(``runbroker --processes``, the processes sharing the port with SO_REUSEPORT, each
count on its own redis-server with AOF everysec):

* RPC — 8 callers (one call at a time each) through a service MQ streamed by 4 workers,
  as in ``bench/zbus.py``: calls/s, lost replies, the broker's CPU per call, and Redis
  scripts and leases (two ``HMGET`` each) per call;
* paced stream — 8 producers at 10 messages a second each (``ack: 0``) to one MQ streamed
  by 8 consumers: the same per message, and produce→delivery p50/p99 — a topic under 20
  messages a second is where a claim that only delayed the others' wake-up saved nothing;

and, in the same run, the raw ``redis-benchmark -P 100 XADD`` baseline and the original
zbus 5.1 Java server (one process, in memory) under the same two loads. The machine is
noisy: compare the lines of one run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import zbus
from bench import zbus_load as load
from bench.harness import (
    broker,
    calls_between,
    raw_xadd,
    redis_calls,
    redis_server,
    sent_between,
    tree_cpu_seconds,
)
from brokers.servers.jmq4 import install_uvloop

PACED_MQ = zbus.MQS[0]


def _per(count: float, n: int) -> str:
    return f"{count / n:5.2f}" if n else "    -"


def _redis_per(redis_port: int | None, before: dict[str, int], n: int, unit: str) -> str:
    """Scripts and leases (two ``HMGET`` each) per ``unit`` since ``before`` (nothing for
    a server without our Redis)."""
    if not redis_port:
        return ""
    after = redis_calls(redis_port)
    _, scripts = calls_between(before, after)
    leases = sent_between(before, after).get("hmget", 0) / 2
    return f"  scripts {_per(scripts, n)}  leases {_per(leases, n)} /{unit}"


async def measure(name: str, port: int, pid: int, redis_port: int | None, seconds: float) -> None:
    """Both loads on one server; one line each."""
    await load.create_mqs(port, [zbus.SERVICE, zbus.WARM_SERVICE, PACED_MQ])
    await load.rpc(port, zbus.WARM_SERVICE, 2)  # scripts loaded, connections open
    before = redis_calls(redis_port) if redis_port else {}
    cpu = tree_cpu_seconds(pid)
    rpc = await load.rpc(port, zbus.SERVICE, seconds)
    cpu = tree_cpu_seconds(pid) - cpu
    line = (
        f"  {name:20} RPC     {rpc.rate:8,.0f} calls/s  lost {rpc.lost:3}"
        f"  cpu {cpu / max(1, rpc.count) * 1e6:6.0f} µs/call"
    )
    print(line + _redis_per(redis_port, before, rpc.count, "call"), flush=True)
    before = redis_calls(redis_port) if redis_port else {}
    cpu = tree_cpu_seconds(pid)
    paced = await load.paced_stream(port, PACED_MQ, seconds)
    cpu = tree_cpu_seconds(pid) - cpu
    lat = sorted(paced.latencies_ms)
    p50 = statistics.median(lat) if lat else float("nan")
    p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))] if lat else float("nan")
    line = (
        f"  {name:20} paced   {paced.delivered:5}/{paced.sent:<5} delivered"
        f"  p50 {p50:5.2f} ms  p99 {p99:6.2f} ms  cpu {cpu / max(1, paced.sent) * 1e6:6.0f} µs/msg"
    )
    print(line + _redis_per(redis_port, before, paced.sent, "msg"), flush=True)


async def main(args: argparse.Namespace) -> None:
    processes = [int(p) for p in args.processes.split(",") if p]
    with contextlib.ExitStack() as stack:
        if args.no_java:
            print("zbus 5.1 server: skipped (--no-java)", flush=True)
        else:
            java = stack.enter_context(zbus.java_server())
            if isinstance(java, str):
                print(f"zbus 5.1 server: SKIPPED, {java}", flush=True)
            else:
                await measure("zbus 5.1 (Java)", java[0], java[1], None, args.seconds)
        for n, count in enumerate(processes):
            with contextlib.ExitStack() as inner:
                redis_port = inner.enter_context(redis_server())
                if n == 0:
                    raw = raw_xadd(redis_port, 500_000)
                    print(f"  raw redis-benchmark -P 100 XADD: {raw:,.0f} ops/s", flush=True)
                port, pid = inner.enter_context(broker(zbus.__file__, redis_port, count))
                name = f"ours, {count} process" + ("es" if count > 1 else "")
                await measure(name, port, pid, redis_port, args.seconds)


if __name__ == "__main__":
    install_uvloop()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=4.0, help="per load")
    parser.add_argument("--processes", default="1,2,4", help="our broker's process counts")
    parser.add_argument("--no-java", action="store_true", help="only our server")
    asyncio.run(main(parser.parse_args()))
