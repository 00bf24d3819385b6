"""zbus benchmark against the original zbus 5.1 server (a script, not a test):
``python bench/zbus.py [--seconds 4] [--processes 1,2] [--source] [--profile DIR]``.

In one run, side by side:

* the original zbus 5.1 Java server (``../shared/peers/zbus-5.1/`` next to the repository:
  ``L.java`` compiled against the jar into a temporary directory, run on a free loopback
  port, stopped by its PID; in memory only — no disk, no fsync);
* our zbus server as a broker runs in production: its own process (``runbroker``'s server
  code, uvloop, GC tuning, 64 Redis connections) on its own redis-server with AOF
  everysec, once with 1 process and once with 2 processes sharing the port with
  SO_REUSEPORT (``runbroker --processes``); MQs are catalog topics open to token-less
  clients (the anonymous app of their team has a producer and a consumer policy, as an MQ
  made by ``create_mq`` has).

* the Python floor (:mod:`bench.zbus_floor`; ``--no-floor`` leaves it out): one uvloop
  process answering the generator's commands from in-memory deques — no storage, catalog
  or policies — what a single asyncio process can reach here at all.

Every server is loaded by the same generator (:mod:`bench.zbus_load`, written from the
protocol text, not our client), after the same warm-up pass (the JVM compiles its hot
paths during it); the phases run one server after the other, phase by phase, so drifting
load on the machine touches all of them alike:

* produce — 8 connections, one MQ each, 128 produces (ack on, 100-byte bodies) in flight;
* streaming consume — 8 connections, ``window: -1``, over what the produce phase stored;
* long-poll consume — 8 connections, ``window: 1`` (consume, wait, consume again) over a
  backlog stored before the phase;
* RPC — 8 callers (one call at a time each) through a service MQ streamed by 4 workers;
  a call without reply within 1 s counts as lost.

Each phase line also gives the server's CPU per message or call (the server process and
its children from /proc, not Redis): a figure that holds when the machine's speed drifts;
and how busy the whole machine was (server, generator and Redis, all cores, from
/proc/stat): near 100 %, a second process has no core of its own to run on, so 1 and 2
processes measure the machine, not the scaling.
Then a table: each figure, ours/Java next to the goal of issue 17 (produce ≥ 1×, streaming
≥ 1×, long-poll ≥ 2×, RPC ≥ 2× with 0 lost), and the raw ``redis-benchmark -P 100 XADD``
baseline of the same run. A goal gets no verdict ("NO VERDICT … run again") when the
peer's phase is no baseline: the machine was under 25 % busy during it, or its RPC callers
spent most of the run waiting out lost replies (a stalled JVM measures the timeout).
With ``--profile DIR`` (py-spy on PATH or in ``$PY_SPY``) each phase of our brokers is
recorded and its top frames printed (the profiler costs CPU: take the figures from a run
without it).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import zbus_load as load
from bench.harness import (
    broker,
    busy_share,
    calls_between,
    cpu_times,
    free_port,
    profiled,
    py_spy,
    raw_xadd,
    redis_calls,
    redis_server,
    serve_main,
    steal_share,
    stop_process,
    top_frames,
    tree_cpu_seconds,
)
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
from brokers.servers.zbus import start_zbus_server

REPO = Path(__file__).resolve().parent.parent
PEER = REPO.parent / "shared" / "peers" / "zbus-5.1"
JAR = "zbus-5.1.0-SNAPSHOT.jar"
ANONYMOUS = "bench-anon"
CONNS = 8
MQS = [f"bench{i}" for i in range(CONNS)]
WARM_MQS = [f"warm{i}" for i in range(CONNS)]
SERVICE, WARM_SERVICE = "svc", "warmsvc"
FILL_CAP = 60_000  # most messages per MQ stored for the long-poll phase
GOALS = {"produce": 1.0, "stream": 1.0, "long_poll": 2.0, "rpc": 2.0}
STALLED_BUSY = 0.25
"""A peer phase during which the whole machine was less busy than this did not work
for most of it (a JVM pause, a stalled connection): no baseline for a verdict."""
STALLED_WAITING = 0.75
"""An RPC phase of the peer whose callers spent more than this share of their time
waiting out lost replies measured the reply timeout, not the server: no verdict. (Java's
healthy runs lose 11-20 replies in 4 s, 34-62 % of the callers' time; its stalled ones
31-32, about 90 %.)"""


def snapshot(port: int) -> CatalogSnapshot:
    """Our broker's catalog: the benchmark's MQs (:func:`mq_catalog`)."""
    return mq_catalog(port, [*MQS, *WARM_MQS, SERVICE, WARM_SERVICE])


def mq_catalog(port: int, codes: list[str]) -> CatalogSnapshot:
    """A catalog where every MQ of ``codes`` is a one-partition topic led by this broker
    (zbus on ``port``), open to token-less clients as a ``create_mq`` MQ is (its team's
    anonymous app has policies)."""
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


# ---------------------------------------------------------------- the Java server


@contextlib.contextmanager
def java_server() -> Iterator[tuple[int, int] | str]:
    """The zbus 5.1 server on a free loopback port: yields (port, pid), or why it cannot
    run (no jar next to the repository, no java/javac)."""
    jar = PEER / JAR
    if not jar.is_file() or not (PEER / "L.java").is_file():
        yield f"no {JAR} and L.java in {PEER}"
        return
    java, javac = shutil.which("java"), shutil.which("javac")
    if java is None or javac is None:
        yield "java/javac not on PATH"
        return
    scratch = Path(tempfile.mkdtemp(prefix="zbus51-"))
    proc = None
    try:
        subprocess.run(
            [javac, "-cp", str(jar), "-d", str(scratch), str(PEER / "L.java")],
            check=True, capture_output=True,
        )  # fmt: skip
        port = free_port()
        proc = subprocess.Popen(
            [java, "-cp", f"{jar}:{scratch}", "L", str(port)],
            cwd=scratch, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), 0.2).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the zbus 5.1 server did not start") from None
                time.sleep(0.1)
        yield port, proc.pid
    finally:
        if proc is not None:
            stop_process(proc, 10)
        shutil.rmtree(scratch, ignore_errors=True)


@contextlib.contextmanager
def floor_server() -> Iterator[tuple[int, int]]:
    """:mod:`bench.zbus_floor` (an in-memory Python zbus server doing no more than the
    generator's commands need) on a free loopback port: yields (port, pid)."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, str(Path(__file__).with_name("zbus_floor.py")), str(port)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        if line.strip() != "ready":
            raise RuntimeError(f"the Python floor server did not start: {line!r}")
        yield port, proc.pid
    finally:
        stop_process(proc, 10)


# ---------------------------------------------------------------- the run


@dataclass
class Target:
    """One server under load."""

    name: str
    port: int
    pid: int
    ours: bool
    floor: bool = False
    """The in-memory Python floor (:mod:`bench.zbus_floor`), not a broker."""
    results: dict[str, load.Result] = field(default_factory=dict)
    cpu_us: dict[str, float] = field(default_factory=dict)
    """Server CPU (the process and its children, not Redis) per message or call."""
    redis_port: int = 0
    """Our broker's own Redis (0: not ours)."""
    redis_per: dict[str, tuple[float, float]] = field(default_factory=dict)
    """Phase → (Redis commands, scripts) per message or call: what a fleet's shared
    Redis pays for it."""
    busy: dict[str, float] = field(default_factory=dict)
    """Phase → how busy the whole machine was during it (1.0: every core)."""
    fill: int = 0
    stalled: str = ""
    """Why this target has no more figures (it stopped answering), if it does not."""

    @property
    def slug(self) -> str:
        """The name as a file name part."""
        return "".join(c if c.isalnum() else "-" for c in self.name).strip("-")


async def warm_up(target: Target, seconds: float) -> None:
    """The measured pass, shorter and on other MQs: the JVM compiles its hot paths, our
    broker loads its scripts and opens its Redis connections."""
    produced = await load.produce(target.port, WARM_MQS, seconds=seconds)
    await load.stream_consume(target.port, WARM_MQS, produced.per_mq)
    per_mq = max(1, min(FILL_CAP, int(produced.rate * seconds / CONNS)))
    await load.produce(target.port, WARM_MQS, per_mq=per_mq)
    await load.long_poll(target.port, WARM_MQS, [per_mq] * CONNS, seconds)
    await load.rpc(target.port, WARM_SERVICE, seconds)


async def phase(name: str, targets: list[Target], profile: Path | None, run) -> None:
    """Run ``run(target)`` on every target in turn (ours recorded when profiling). A
    target that stops answering (the generator's 30 s wait ran out) is reported as
    stalled, with no figures for this phase and the ones after it, and the others go on."""
    for t in targets:
        out = profile / f"zbus-{t.slug}-{name}.txt" if profile else None
        if t.stalled:
            t.results[name] = load.Result(per_mq=[0] * CONNS, note=t.stalled)
            t.cpu_us[name] = 0.0
            continue
        with profiled(t.pid, out if t.ours else None):
            calls = redis_calls(t.redis_port) if t.redis_port else {}
            cpu = tree_cpu_seconds(t.pid)
            machine = cpu_times()
            try:
                result = await run(t)
            except TimeoutError:
                t.stalled = f"stalled in {name}: a connection got no reply within 30 s"
                result = load.Result(per_mq=[0] * CONNS, note=t.stalled)
            cpu = tree_cpu_seconds(t.pid) - cpu
            busy = t.busy[name] = busy_share(machine, cpu_times())
            if t.redis_port and result.count:
                total, scripts = calls_between(calls, redis_calls(t.redis_port))
                t.redis_per[name] = (total / result.count, scripts / result.count)
        t.results[name] = result
        t.cpu_us[name] = cpu / result.count * 1e6 if result.count else 0.0
        per, unit = t.redis_per.get(name), "call" if name == "rpc" else "msg"
        print(
            f"  {name:10} {t.name:18} {result.rate:>10,.0f}/s  n={result.count:<8,} "
            f"{result.seconds:5.1f}s  generator cpu {result.cpu:4.0%}"
            f"  server cpu {t.cpu_us[name]:5.1f} µs/{unit}"
            + (f"  errors={result.errors}" if result.errors else "")
            + (f"  lost={result.lost}" if name == "rpc" else "")
            + (f"  redis {per[0]:.2f} cmds ({per[1]:.2f} scripts)/{unit}" if per else "")
            + f"  machine busy {busy:.0%} of {os.cpu_count()} cores"
            + (f"  {result.note}" if result.note else ""),
            flush=True,
        )


async def measure(targets: list[Target], seconds: float, profile: Path | None) -> None:
    async def produce(t: Target) -> load.Result:
        return await load.produce(t.port, MQS, seconds=seconds)

    async def stream(t: Target) -> load.Result:
        return await load.stream_consume(t.port, MQS, t.results["produce"].per_mq)

    async def long_poll(t: Target) -> load.Result:
        return await load.long_poll(t.port, MQS, [t.fill] * CONNS, seconds)

    async def rpc(t: Target) -> load.Result:
        return await load.rpc(t.port, SERVICE, seconds)

    await phase("produce", targets, profile, produce)
    await phase("stream", targets, profile, stream)
    for t in targets:  # the long-poll backlog: about `seconds` of produce, not timed
        if t.stalled:
            continue
        t.fill = max(1, min(FILL_CAP, int(t.results["produce"].rate * seconds / CONNS)))
        try:
            filled = await load.produce(t.port, MQS, per_mq=t.fill)
        except TimeoutError:
            t.stalled = "stalled filling the long-poll backlog: no reply within 30 s"
            continue
        if filled.errors:
            print(f"  fill {t.name}: {filled.errors} produce errors", flush=True)
    await phase("long_poll", targets, profile, long_poll)
    await phase("rpc", targets, profile, rpc)


def report(targets: list[Target], raw: float) -> None:
    java = next((t for t in targets if not t.ours and not t.floor), None)
    ours = [t for t in targets if t.ours or t.floor]
    rows = [
        ("produce", "produce msg/s, 8 conns"),
        ("stream", "streaming consume msg/s (window -1)"),
        ("long_poll", "long-poll consume msg/s (window 1)"),
        ("rpc", "RPC calls/s, 8 callers"),
    ]
    head = f"{'':38}" + (f"{java.name:>16}" if java else "")
    for t in ours:
        head += f"{t.name:>24}" + ("   ours/Java" if java else "") + "   ours/raw"
    head += "   goal (ours/Java)" if java else ""
    print()
    print(head)
    for key, label in rows:
        line = f"{label:38}"
        if java:
            line += f"{java.results[key].rate:16,.0f}"
        for t in ours:
            value = t.results[key].rate
            line += f"{value:24,.0f}"
            if java:
                base = java.results[key].rate
                line += f"{value / base:11.2f}x" if base else f"{'n/a':>12}"
            line += f"{value / raw:10.2f}x"
        if java:
            line += f"   >= {GOALS[key]:.0f}x"
        print(line)
    line = f"{'RPC lost replies':38}"
    if java:
        line += f"{java.results['rpc'].lost:16}"
    for t in ours:
        line += f"{t.results['rpc'].lost:24}" + (" " * 12 if java else "") + " " * 11
    print(line + ("   0" if java else ""))
    print(f"{'raw redis-benchmark -P 100 XADD ops/s':38}{raw:16,.0f}  (our Redis, same run)")
    if java:
        for t in ours:
            if t.floor:
                continue
            met = [f"{key} {verdict(t, java, key)}" for key, _ in rows]
            lost = t.results["rpc"].lost
            met.append(f"0 lost {'met' if lost == 0 else 'NOT met'}")
            print(f"goals, {t.name}: " + ", ".join(met))


def verdict(ours: Target, peer: Target, key: str) -> str:
    """Whether ``ours`` met the goal of phase ``key`` against ``peer``; no verdict when
    the peer's phase is no baseline (:func:`peer_stalled`)."""
    stalled = peer_stalled(peer, key)
    if stalled:
        return f"NO VERDICT ({stalled}: run again)"
    met = ours.results[key].rate >= GOALS[key] * peer.results[key].rate
    return "met" if met else "NOT met"


def peer_stalled(peer: Target, key: str) -> str:
    """Why the peer's figure of phase ``key`` is no baseline, or "" when it is one."""
    result = peer.results[key]
    if peer.stalled or not result.count:
        return "the peer stalled"
    busy = peer.busy.get(key)
    if busy is not None and busy < STALLED_BUSY:
        return f"the machine was {busy:.0%} busy during the peer's run"
    if result.waiting > STALLED_WAITING:
        return f"the peer's callers spent {result.waiting:.0%} of the run waiting for lost replies"
    return ""


async def main(args: argparse.Namespace) -> None:
    processes = [int(p) for p in args.processes.split(",") if p]
    profile = Path(args.profile) if args.profile else None
    if profile and py_spy() is None:
        print("--profile: py-spy not found (pip install py-spy; or set PY_SPY)", flush=True)
        profile = None
    with contextlib.ExitStack() as stack:
        targets: list[Target] = []
        raw = 0.0
        if args.no_java:
            print("zbus 5.1 server: skipped (--no-java)", flush=True)
        else:
            java = stack.enter_context(java_server())
            if isinstance(java, str):
                print(f"zbus 5.1 server: SKIPPED, {java}", flush=True)
            else:
                targets.append(Target("zbus 5.1 (Java)", java[0], java[1], ours=False))
        if args.floor:
            port, pid = stack.enter_context(floor_server())
            targets.append(Target("Python floor", port, pid, ours=False, floor=True))
        ours = [(count, False) for count in processes]
        if args.source:
            ours.insert(0, (1, True))
        for n, (count, source) in enumerate(ours):
            redis_port = stack.enter_context(redis_server())
            if n == 0:
                raw = raw_xadd(redis_port, 500_000)
            port, pid = stack.enter_context(broker(__file__, redis_port, count, source=source))
            name = f"ours, {count} process" + ("es" if count > 1 else "")
            name += ", source" if source else ""
            targets.append(Target(name, port, pid, ours=True, redis_port=redis_port))
        for t in targets:
            await load.create_mqs(t.port, [*MQS, *WARM_MQS, SERVICE, WARM_SERVICE])
            started = time.perf_counter()
            await warm_up(t, args.warmup)
            print(f"warmed up {t.name} in {time.perf_counter() - started:.0f}s", flush=True)
        before = cpu_times()
        await measure(targets, args.seconds, profile)
        print(f"cpu steal while measuring: {steal_share(before, cpu_times()):.1%}", flush=True)
        report(targets, raw)
    if profile:
        for path in sorted(profile.glob("zbus-*.txt")):
            print(f"\n== profile {path.name} ==\n{top_frames(path)}")


if __name__ == "__main__":
    install_uvloop()
    if not serve_main(sys.argv, snapshot, start_zbus_server):
        parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
        parser.add_argument("--seconds", type=float, default=4.0, help="per measured phase")
        parser.add_argument("--warmup", type=float, default=2.0, help="per warm-up phase")
        parser.add_argument(
            "--processes", default="1,2", help="our broker's process counts, e.g. 1,2"
        )
        parser.add_argument("--no-java", action="store_true", help="only our server")
        parser.add_argument(
            "--source", action="store_true",
            help="also ours, 1 process, from source (MQCLOUD_PURE_PYTHON=1), to compare",
        )  # fmt: skip
        parser.add_argument(
            "--no-floor", dest="floor", action="store_false",
            help="without the in-memory Python floor (bench/zbus_floor.py)",
        )  # fmt: skip
        parser.add_argument("--profile", default="", help="record our brokers with py-spy here")
        asyncio.run(main(parser.parse_args()))
