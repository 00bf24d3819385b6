"""The compiled hot path against the same code from source, interleaved (a script, not a
test): ``python bench/compiled.py [--rounds 8] [--seconds 1] [--phases long_poll,rpc,...]``.

Whether the Cython build (``brokers/compiled.py``) pays off depends on the machine: it
removes the interpreter's dispatch, but its untyped attribute and method lookups go
through the generic C API each time, where CPython 3.11's specializing interpreter caches
them per instruction. This answers the question for the machine it runs on, for the zbus
server (``runbroker``'s server code, one process each, each on its own redis-server):
both brokers run at once, and each phase loads them in short rounds, alternately (the
order flips every round), so a machine whose speed drifts — this one's did by a third
within minutes — touches both alike. For each phase it prints the broker's CPU per
message or call (its process, from /proc) over all rounds, the median and range of the
rounds, and compiled/source; the raw ``redis-benchmark -P 100 XADD`` baseline first.

Phases (the generator of :mod:`bench.zbus_load`, written from the protocol text):

* ``produce`` — 8 connections, one MQ each, produces with acks in flight;
* ``stream`` — 8 streaming consumers (``window: -1``) over what a round produced first
  (that produce is not counted);
* ``long_poll`` — 8 long pollers (``window: 1``) over a backlog stored before the rounds;
* ``rpc`` — 8 callers, one call at a time each, through a service MQ streamed by 4 workers.

A figure where the source wins means: run brokers with ``MQCLOUD_PURE_PYTHON=1`` on
such machines for that load.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import zbus
from bench import zbus_load as load
from bench.harness import (
    broker,
    cpu_times,
    raw_xadd,
    redis_server,
    steal_share,
    tree_cpu_seconds,
)
from brokers.servers.jmq4 import install_uvloop

PHASES = ("produce", "stream", "long_poll", "rpc")
LONG_POLL_FILL = 60_000
"""Messages per MQ stored before the long-poll rounds; after each round what it took is
stored again, not measured (a round must not find its MQs drained)."""


@dataclass
class Target:
    """One broker and what its rounds measured."""

    name: str
    port: int
    pid: int
    cpu_us: dict[str, list[float]] = field(default_factory=dict)
    """Phase → the broker's CPU per message or call, one figure per round."""
    totals: dict[str, list[float]] = field(default_factory=dict)
    """Phase → [CPU seconds, messages or calls] over all rounds."""


Round = Callable[[Target, float], Awaitable[int]]


async def produce_round(t: Target, seconds: float) -> int:
    return (await load.produce(t.port, zbus.MQS, seconds=seconds)).count


async def long_poll_round(t: Target, seconds: float) -> int:
    totals = [LONG_POLL_FILL] * zbus.CONNS
    return (await load.long_poll(t.port, zbus.MQS, totals, seconds)).count


async def top_up(t: Target, taken: int) -> None:
    """The long-poll backlog back to about :data:`LONG_POLL_FILL` per MQ after a round
    that took ``taken`` (spread over the MQs)."""
    if taken:
        await load.produce(t.port, zbus.MQS, per_mq=taken // zbus.CONNS + 1)


async def rpc_round(t: Target, seconds: float) -> int:
    return (await load.rpc(t.port, zbus.SERVICE, seconds)).count


async def measured(t: Target, phase: str, seconds: float) -> tuple[float, int]:
    """One round of ``phase`` against ``t``: (broker CPU seconds, messages or calls)."""
    if phase == "stream":  # what the consumers take is produced first, not counted
        produced = await load.produce(t.port, zbus.WARM_MQS, seconds=seconds)
        cpu = tree_cpu_seconds(t.pid)
        count = (await load.stream_consume(t.port, zbus.WARM_MQS, produced.per_mq)).count
        return tree_cpu_seconds(t.pid) - cpu, count
    run: Round = {"produce": produce_round, "long_poll": long_poll_round, "rpc": rpc_round}[phase]
    cpu = tree_cpu_seconds(t.pid)
    count = await run(t, seconds)
    cpu = tree_cpu_seconds(t.pid) - cpu
    if phase == "long_poll":
        await top_up(t, count)
    return cpu, count


async def prepare(targets: list[Target], phase: str) -> None:
    """What a phase needs before its rounds: the long-poll backlog, and one short
    unmeasured round each (connections, scripts, the JIT of nobody: a first round pays
    for what every later one reuses)."""
    for t in targets:
        if phase == "long_poll":
            await load.produce(t.port, zbus.MQS, per_mq=LONG_POLL_FILL)
        await measured(t, phase, 0.5)


async def run_phase(targets: list[Target], phase: str, rounds: int, seconds: float) -> None:
    await prepare(targets, phase)
    for n in range(rounds):
        for t in targets if n % 2 == 0 else targets[::-1]:
            cpu, count = await measured(t, phase, seconds)
            if count:
                t.cpu_us.setdefault(phase, []).append(cpu / count * 1e6)
            total = t.totals.setdefault(phase, [0.0, 0])
            total[0] += cpu
            total[1] += count


def report(targets: list[Target], phases: list[str]) -> None:
    compiled, source = targets
    print(f"\n{'phase':10} {'broker':9} {'µs per msg/call':>16} {'median':>8} {'range':>15}")
    for phase in phases:
        overall = {}
        for t in targets:
            cpu, count = t.totals.get(phase, (0.0, 0))
            per = t.cpu_us.get(phase) or [0.0]
            overall[t.name] = cpu / count * 1e6 if count else 0.0
            print(
                f"{phase:10} {t.name:9} {overall[t.name]:16.1f} {statistics.median(per):8.1f}"
                f" {min(per):7.1f}–{max(per):<7.1f}"
            )
        if overall[source.name]:
            ratio = overall[compiled.name] / overall[source.name]
            verdict = "compiled wins" if ratio < 0.97 else "source wins" if ratio > 1.03 else "even"
            print(f"{phase:10} compiled/source CPU {ratio:.2f}× ({verdict})")


async def main(args: argparse.Namespace) -> None:
    phases = [p for p in args.phases.split(",") if p]
    unknown = set(phases) - set(PHASES)
    if unknown:
        raise SystemExit(f"unknown phases {sorted(unknown)}; choose from {', '.join(PHASES)}")
    with contextlib.ExitStack() as stack:
        targets = []
        for name, source in (("compiled", False), ("source", True)):
            redis_port = stack.enter_context(redis_server())
            if not targets:
                print(
                    f"raw redis-benchmark -P 100 XADD: {raw_xadd(redis_port, 500_000):,.0f} ops/s"
                )
            port, pid = stack.enter_context(broker(zbus.__file__, redis_port, 1, source=source))
            targets.append(Target(name, port, pid))
        for t in targets:
            await load.create_mqs(
                t.port, [*zbus.MQS, *zbus.WARM_MQS, zbus.SERVICE, zbus.WARM_SERVICE]
            )
        before = cpu_times()
        for phase in phases:
            await run_phase(targets, phase, args.rounds, args.seconds)
            print(f"measured {phase}", flush=True)
        print(f"cpu steal while measuring: {steal_share(before, cpu_times()):.1%}")
        report(targets, phases)


if __name__ == "__main__":
    install_uvloop()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=8, help="rounds per broker and phase")
    parser.add_argument("--seconds", type=float, default=1.0, help="per round")
    parser.add_argument("--phases", default=",".join(PHASES), help="of " + ",".join(PHASES))
    asyncio.run(main(parser.parse_args()))
