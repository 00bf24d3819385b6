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
once per zbus ``settle_delay`` (how long acks wait to go to the engine together).

Then, for ours, recovery at fleet size (``--outage 0.3``; 0 leaves it out): a long poll
parked on every (now empty) MQ, Redis killed (``kill -9``) and started again after that
many seconds, one message produced to every MQ: how long until the last poller got its
message, and pollers that got none within 30 s. The raw ``redis-benchmark -P 100 XADD``
rate of the same Redis is printed first.
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
    RestartableRedis,
    broker,
    busy_share,
    calls_between,
    cpu_times,
    raw_xadd,
    redis_calls,
    sent_between,
    serve_main,
    tree_cpu_seconds,
)
from bench.zbus import java_server, mq_catalog
from brokers.engine import CatalogSnapshot
from brokers.servers.jmq4 import install_uvloop
from brokers.servers.zbus import ZbusConfig, start_zbus_server

WARM_MQS = [f"warm{i}" for i in range(8)]
FILL_CONNS = 200
"""Producer connections open at once while the backlog is stored."""


def mq_names(count: int) -> list[str]:
    """The fleet's MQs."""
    return [f"fleet{i}" for i in range(count)]


def snapshot(port: int) -> CatalogSnapshot:
    """Our broker's catalog: ``BENCH_FLEET_MQS`` MQs and the warm-up MQs, each a
    one-partition topic open to token-less clients (:func:`bench.zbus.mq_catalog`)."""
    return mq_catalog(port, [*mq_names(int(os.environ.get("BENCH_FLEET_MQS", "1000"))), *WARM_MQS])


def start_server(*args: Any, **kwargs: Any) -> Awaitable[Any]:
    """Our zbus server, with ``BENCH_SETTLE_DELAY`` as its ``settle_delay`` and
    ``BENCH_SETTLE_GATHER`` as its ``settle_gather`` when set."""
    delay = os.environ.get("BENCH_SETTLE_DELAY")
    gather = os.environ.get("BENCH_SETTLE_GATHER")
    if delay or gather:
        config = ZbusConfig.from_environment()
        if delay:
            config = dataclasses.replace(config, settle_delay=float(delay))
        if gather:
            config = dataclasses.replace(config, settle_gather=int(gather))
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
    errors, _ = await produce_to_each(port, mqs, args.backlog)
    if errors:
        print(f"  {name}: {errors} produce errors while filling", flush=True)
    calls = redis_calls(redis_port) if redis_port else {}
    cpu, machine = tree_cpu_seconds(pid), cpu_times()
    result = await load.long_poll(
        port, mqs, [args.backlog] * len(mqs), args.seconds, stall=args.stall
    )
    cpu = tree_cpu_seconds(pid) - cpu
    busy = busy_share(machine, cpu_times())
    redis = None
    if redis_port and result.count:
        after = redis_calls(redis_port)
        total, scripts = calls_between(calls, after)
        redis = (total / result.count, scripts / result.count)
        if args.commands:
            sent = sorted(sent_between(calls, after).items(), key=lambda kv: -kv[1])
            print(
                f"  {name}: Redis commands per poll: "
                + ", ".join(f"{k} {n / result.count:.3f}" for k, n in sent),
                flush=True,
            )
    figures = Figures(name, result, cpu / result.count * 1e6 if result.count else 0.0, busy, redis)
    print(
        f"  {name:40} {result.rate:>9,.0f} polls/s  n={result.count:<8,} {result.seconds:5.1f}s"
        f"  server cpu {figures.cpu_us:6.1f} µs/poll"
        + (f"  redis {redis[0]:.2f} cmds ({redis[1]:.3f} scripts)/poll" if redis else "")
        + f"  stalled pollers {figures.stalled}  generator cpu {result.cpu:4.0%}"
        f"  machine busy {busy:.0%}",
        flush=True,
    )
    if figures.stalled:
        stalls = result.note.split(";")
        print(
            f"  stalled: {';'.join(stalls[:10])}" + (" …" if len(stalls) > 11 else ""), flush=True
        )
    return figures


async def produce_to_each(port: int, mqs: list[str], per_mq: int) -> tuple[int, list[str]]:
    """``per_mq`` produces to every MQ of ``mqs``, :data:`FILL_CONNS` connections at a
    time: (produces answered with an error, the MQs that had one)."""
    errors, failed = 0, []
    for i in range(0, len(mqs), FILL_CONNS):
        part = mqs[i : i + FILL_CONNS]
        sent = await load.produce(port, part, per_mq=per_mq)
        errors += sent.errors
        failed += [mq for mq, ok in zip(part, sent.per_mq, strict=True) if ok < per_mq]
    return errors, failed


async def after_outage(
    port: int, mqs: list[str], redis: RestartableRedis, seconds: float
) -> tuple[list[float], int, dict[int, int], int]:
    """Park a long poll on every MQ, take Redis down for ``seconds``, then produce one
    message to every MQ, as clients do: a produce answered with an error is sent again
    0.1 s later, a poller answered with an error consumes again. (Each poller's wait for
    its message from Redis's restart, sorted; pollers that got none within 30 s; the
    error statuses the pollers were answered with, and how often; produces answered with
    an error.)"""
    conns = await asyncio.gather(*(load.Conn.open(port) for _ in mqs))
    consumes = [
        load.frame({"cmd": "consume", "mq": mq, "msgid": f"o{i}", "window": "1"})
        for i, mq in enumerate(mqs)
    ]
    for conn, consume in zip(conns, consumes, strict=True):
        conn.write(consume)
    await asyncio.sleep(1.0)
    # an MQ's last message before was never acked (its poller left with it: released),
    # so it came again: acked by consuming again, which parks the poll
    for conn, consume in zip(conns, consumes, strict=True):
        if conn.ready:
            conn.ready.clear()
            conn.write(consume)
    await asyncio.sleep(1.0)  # every poll parked, its acks settled
    if any(conn.ready for conn in conns):
        print("  a parked poll got a message before the outage", flush=True)
    redis.outage(seconds)  # blocks this loop; the broker is a process of its own
    back = loop_time()
    waits: list[float] = []
    errors: dict[int, int] = {}
    missing = 0

    async def poll(conn: load.Conn, consume: bytes) -> None:
        nonlocal missing
        deadline = back + 30
        try:
            while True:
                for msg in await conn.read(max(0.0, deadline - loop_time())):
                    if msg.status == 200:
                        waits.append(loop_time() - back)
                        return
                    errors[msg.status] = errors.get(msg.status, 0) + 1
                    conn.write(consume)
        except (TimeoutError, ConnectionError):
            missing += 1

    polling = [
        asyncio.create_task(poll(conn, consume))
        for conn, consume in zip(conns, consumes, strict=True)
    ]
    unsent, refused = list(mqs), 0
    while unsent and loop_time() < back + 30:
        failures, unsent = await produce_to_each(port, unsent, 1)
        refused += failures
        if unsent:
            await asyncio.sleep(0.1)
    await asyncio.gather(*polling)
    for conn in conns:
        conn.close()
    return sorted(waits), missing, errors, refused


def loop_time() -> float:
    """The running loop's clock."""
    return asyncio.get_running_loop().time()


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
                with contextlib.closing(RestartableRedis()) as redis:
                    if not raw:
                        raw = raw_xadd(redis.port, 500_000)
                        print(f"raw redis-benchmark -P 100 XADD: {raw:,.0f} ops/s", flush=True)
                    with broker(__file__, redis.port, count) as (port, pid):
                        name = f"ours, {count} process" + ("es" if count > 1 else "")
                        if delay:
                            name += f", settle_delay {delay}s"
                        results.append(await run(name, port, pid, mqs, args, redis.port))
                        if args.outage > 0:
                            waits, missing, errors, refused = await after_outage(
                                port, mqs, redis, args.outage
                            )
                            last = f"{waits[-1]:.2f}s" if waits else "-"
                            print(
                                f"  {name:40} after a {args.outage}s Redis outage:"
                                f" {len(waits)} pollers got their message, the last {last}"
                                f" after Redis was back; {missing} got none in 30 s;"
                                f" produces answered with an error {refused},"
                                f" polls {sum(errors.values())} {errors or ''}",
                                flush=True,
                            )
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
        parser.add_argument(
            "--outage", type=float, default=0.3,
            help="seconds Redis is down under the parked fleet (0: no outage phase)",
        )  # fmt: skip
        parser.add_argument("--no-java", action="store_true", help="only our server")
        parser.add_argument(
            "--commands", action="store_true", help="print Redis commands per poll, by name"
        )
        asyncio.run(main(parser.parse_args()))
