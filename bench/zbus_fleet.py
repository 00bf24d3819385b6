"""zbus long polls at fleet size, against the original zbus 5.1 server (a script, not a test):
``python bench/zbus_fleet.py [--mqs 1000] [--backlog 100] [--processes 1,2]``.

Issue 17 asks for fleets, not the demo: ``--mqs`` queue MQs, each with ``--backlog``
messages (100-byte bodies) stored first, and one long poller per MQ (``window: 1``, the
zbus 5 clients' default: consume, wait for the delivery, consume again) — every poller
connecting at once, as a fleet does when its broker comes back. Each MQ is polled only a
few times a second, so nothing is shared between consecutive polls of one MQ the way a
single busy MQ shares them (its acks, its leases): what each poll costs at fleet size.

In one run, one after the other: the zbus 5.1 Java server (``../shared/peers/zbus-5.1/``,
in memory; warmed up on a few MQs first), then our broker with each ``--processes``
count on its own redis-server (AOF everysec), as in :mod:`bench.zbus`. For each: polls per
second until every poller got its backlog, the server's CPU per poll, Redis commands and
scripts per poll (ours), how busy the machine was, and pollers that waited
``--stall`` seconds for a delivery with backlog left (a server that cannot take the
fleet's connections at once leaves some waiting for SYN retransmits: 99 of 1,000 pollers
waited 10 s with asyncio's default accept queue). ``--settle-delays 0.005,0.05`` runs ours
once per zbus ``settle_delay`` (how long acks wait to go to the engine together). The raw
``redis-benchmark -P 100 XADD`` rate of the same Redis is printed first.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import os
import sys
from collections.abc import Awaitable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import zbus_load as load
from bench.harness import (
    broker,
    busy_share,
    calls_between,
    cpu_times,
    raw_xadd,
    redis_calls,
    redis_server,
    serve_main,
    tree_cpu_seconds,
)
from bench.zbus import ANONYMOUS, java_server
from brokers.engine import (
    AppInfo,
    BrokerInfo,
    CatalogSnapshot,
    ConsumerPolicyInfo,
    PartitionGroupInfo,
    ProducerPolicyInfo,
    TopicInfo,
)
from brokers.servers.jmq4 import install_uvloop
from brokers.servers.zbus import ZbusConfig, start_zbus_server

WARM_MQS = [f"warm{i}" for i in range(8)]
FILL_CONNS = 200
"""Producer connections open at once while the backlog is stored."""


def mq_names(count: int) -> list[str]:
    """The fleet's MQs."""
    return [f"fleet{i}" for i in range(count)]


def snapshot(port: int) -> CatalogSnapshot:
    """Our broker's catalog: ``BENCH_FLEET_MQS`` one-partition topics led by this broker
    (and the warm-up MQs), open to token-less clients as ``create_mq`` MQs are."""
    codes = [*mq_names(int(os.environ.get("BENCH_FLEET_MQS", "1000"))), *WARM_MQS]
    group = (PartitionGroupInfo(group_id=0, leader=1, partitions=(0,)),)
    topics = {
        code: TopicInfo(
            code=code,
            partitions=1,
            groups=group,
            zbus_mode=1,
            team="zbus",
            anonymous_app=ANONYMOUS,
        )
        for code in codes
    }
    broker_info = BrokerInfo(id=1, host="127.0.0.1", jmq4_port=0, zbus_port=port, vibemq_port=0)
    return CatalogSnapshot(
        version=1,
        brokers={1: broker_info},
        topics=topics,
        apps={ANONYMOUS: AppInfo(code=ANONYMOUS, team="zbus")},
        producers=tuple(
            ProducerPolicyInfo(name=f"anonymous.{c}", topic=c, app=ANONYMOUS) for c in codes
        ),
        consumers=tuple(
            ConsumerPolicyInfo(name=f"anonymous.{c}", topic=c, app=ANONYMOUS) for c in codes
        ),
    )


def start_server(*args: Any, **kwargs: Any) -> Awaitable[Any]:
    """Our zbus server, with ``BENCH_SETTLE_DELAY`` as its ``settle_delay`` when set."""
    delay = os.environ.get("BENCH_SETTLE_DELAY")
    if delay:
        config = dataclasses.replace(ZbusConfig.from_environment(), settle_delay=float(delay))
        kwargs["config"] = config
    return start_zbus_server(*args, **kwargs)


@dataclass
class Figures:
    """What one server's fleet run measured."""

    name: str
    result: load.Result
    cpu_us: float
    busy: float
    redis: tuple[float, float] | None = None

    @property
    def stalled(self) -> int:
        """Pollers that waited ``--stall`` seconds for a delivery."""
        return self.result.note.count("stalled")


async def run(
    name: str, port: int, pid: int, mqs: list[str], args: argparse.Namespace, redis_port: int = 0
) -> Figures:
    """Warm ``port`` up, store the backlog and measure the fleet's long polls."""
    await load.create_mqs(port, [*WARM_MQS, *mqs])
    warm = await load.produce(port, WARM_MQS, seconds=1.0)
    await load.long_poll(port, WARM_MQS, warm.per_mq, 2.0)
    for i in range(0, len(mqs), FILL_CONNS):
        filled = await load.produce(port, mqs[i : i + FILL_CONNS], per_mq=args.backlog)
        if filled.errors:
            print(f"  {name}: {filled.errors} produce errors while filling", flush=True)
    calls = redis_calls(redis_port) if redis_port else {}
    cpu, machine = tree_cpu_seconds(pid), cpu_times()
    result = await load.long_poll(
        port, mqs, [args.backlog] * len(mqs), args.seconds, stall=args.stall
    )
    cpu = tree_cpu_seconds(pid) - cpu
    busy = busy_share(machine, cpu_times())
    redis = None
    if redis_port and result.count:
        total, scripts = calls_between(calls, redis_calls(redis_port))
        redis = (total / result.count, scripts / result.count)
    figures = Figures(name, result, cpu / result.count * 1e6 if result.count else 0.0, busy, redis)
    print(
        f"  {name:40} {result.rate:>9,.0f} polls/s  n={result.count:<8,} {result.seconds:5.1f}s"
        f"  server cpu {figures.cpu_us:6.1f} µs/poll"
        + (f"  redis {redis[0]:.2f} cmds ({redis[1]:.3f} scripts)/poll" if redis else "")
        + f"  stalled pollers {figures.stalled}  generator cpu {result.cpu:4.0%}"
        f"  machine busy {busy:.0%}",
        flush=True,
    )
    return figures


async def main(args: argparse.Namespace) -> None:
    mqs = mq_names(args.mqs)
    os.environ["BENCH_FLEET_MQS"] = str(args.mqs)  # our broker processes build the catalog
    processes = [int(p) for p in args.processes.split(",") if p]
    delays = [d for d in args.settle_delays.split(",") if d] or [""]
    print(
        f"fleet: {args.mqs} MQs, {args.backlog} messages each, one long poller per MQ",
        flush=True,
    )
    results: list[Figures] = []
    raw = 0.0
    with contextlib.ExitStack() as stack:
        if args.no_java:
            print("zbus 5.1 server: skipped (--no-java)", flush=True)
        else:
            java = stack.enter_context(java_server())
            if isinstance(java, str):
                print(f"zbus 5.1 server: SKIPPED, {java}", flush=True)
            else:
                results.append(await run("zbus 5.1 (Java)", java[0], java[1], mqs, args))
        for count in processes:
            for delay in delays:
                if delay:
                    os.environ["BENCH_SETTLE_DELAY"] = delay
                else:
                    os.environ.pop("BENCH_SETTLE_DELAY", None)
                with redis_server() as redis_port:
                    if not raw:
                        raw = raw_xadd(redis_port, 500_000)
                        print(f"raw redis-benchmark -P 100 XADD: {raw:,.0f} ops/s", flush=True)
                    with broker(__file__, redis_port, count) as (port, pid):
                        name = f"ours, {count} process" + ("es" if count > 1 else "")
                        if delay:
                            name += f", settle_delay {delay}s"
                        results.append(await run(name, port, pid, mqs, args, redis_port))
    java_rate = next((f.result.rate for f in results if "Java" in f.name), 0.0)
    print(f"\n{'':42}{'polls/s':>10}{'vs Java':>9}{'vs raw XADD':>13}{'stalled':>9}")
    for f in results:
        vs_java = f"{f.result.rate / java_rate:.2f}x" if java_rate else "-"
        vs_raw = f"{f.result.rate / raw:.3f}x" if raw else "-"
        print(f"  {f.name:40}{f.result.rate:>10,.0f}{vs_java:>9}{vs_raw:>13}{f.stalled:>9}")


if __name__ == "__main__":
    install_uvloop()
    if not serve_main(sys.argv, snapshot, start_server):
        parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
        parser.add_argument("--mqs", type=int, default=1000, help="queue MQs, one poller each")
        parser.add_argument("--backlog", type=int, default=100, help="messages per MQ")
        parser.add_argument("--seconds", type=float, default=60.0, help="longest the polls run")
        parser.add_argument(
            "--stall", type=float, default=10.0, help="a poller waiting this long is stalled"
        )
        parser.add_argument("--processes", default="1,2", help="our broker's process counts")
        parser.add_argument(
            "--settle-delays", default="",
            help="run ours once per zbus settle_delay, e.g. 0.005,0.05 (default: its default)",
        )  # fmt: skip
        parser.add_argument("--no-java", action="store_true", help="only our server")
        asyncio.run(main(parser.parse_args()))
