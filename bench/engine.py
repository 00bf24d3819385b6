"""Engine benchmark: append/read msg/s, fetch+ack latency, and consume rate vs depth.

Starts its own redis-server (AOF on, appendfsync everysec) on a free port, measures the
raw Redis baseline with ``redis-benchmark -P 100`` (pipelined XADD, and XRANGE COUNT 100
for reads) in the same run, then the engine with 100-byte messages: one per call, 32 per
call, 100 per call and batch messages of 100 items. Every figure is printed on one line
with its ratio to the raw figure.

Then "consume rate with 10^7 stored within 10% of 10^4" (issue 17): a partition holding
10^4 messages against one holding ``--backlog`` (default 10^7). Both are filled through
the engine: the deep one with large atomic appends (``--fill-per-call`` messages per
call, one stream entry each) up to its last ``--region`` messages; the last ``--region``
messages of both are appended 32 per call, as a JMQ4 producer sends them, so the part
consumed has the same layout at both depths. Consume is measured over that last part
with the two consumer paths: pull (fetch 256 + ack: JMQ4, HTTP-MQ) and consumer-group
leases (lease 256 + settle: zbus, VibeMQ), ``--passes`` times each, depths alternating
(the offsets reset to the part's start each pass); medians and deep/small are printed.
The free memory is checked first: where the backlog would not fit in half of it, a
smaller one is used and said so. Auto AOF rewrite is off while filling; one rewrite runs
after the fill, before measuring (so none runs while measuring).

Finally append cost, and random-read and fetch-latency cost within that last part, at both
depths.

    .venv/bin/python bench/engine.py [--backlog 10000000] [--region 10000] [--passes 7]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))

import redis.asyncio as aioredis
from localservices import RedisServer, free_port

from brokers.engine import (
    BatchItem,
    CatalogSnapshot,
    ConsumerPolicyInfo,
    Engine,
    Message,
    ProducerPolicyInfo,
    TopicInfo,
    encode_record,
)
from brokers.engine.keys import PartitionKeys

BODY = b"x" * 100


def start_redis(datadir: Path) -> tuple[subprocess.Popen, int]:
    """The benchmark's own redis-server (AOF, appendfsync everysec) on a free port."""
    server = RedisServer(datadir, free_port())
    server.start()
    return server.process, server.port


def redis_benchmark(port: int, *command: str, n: int = 200_000) -> float:
    out = subprocess.run(
        ["redis-benchmark", "-p", str(port), "-P", "100", "-n", str(n), "-q", *command],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    rates = re.findall(r"([\d.]+) requests per second", out)
    if not rates:
        raise RuntimeError(f"cannot parse redis-benchmark output: {out!r}")
    return float(rates[-1])


def catalog(partitions: int) -> CatalogSnapshot:
    """App ``a`` produces and pull-consumes every topic; app ``g`` consumes ``small`` and
    ``deep`` through consumer-group leases (its own progress, so the pull consumer's
    partition lock never meets its ranges)."""
    topics = {
        code: TopicInfo(code=code, partitions=partitions) for code in ("bench", "small", "deep")
    }
    return CatalogSnapshot(
        version=1,
        topics=topics,
        producers=tuple(ProducerPolicyInfo(name=f"a.{c}", topic=c, app="a") for c in topics),
        consumers=(
            *(ConsumerPolicyInfo(name=f"a.{c}", topic=c, app="a") for c in topics),
            *(ConsumerPolicyInfo(name=f"g.{c}", topic=c, app="g") for c in ("small", "deep")),
        ),
    )


async def timed(tasks: int, seconds: float, op) -> float:
    """Run ``op(task_no)`` (returns messages handled) in ``tasks`` loops; messages/s."""
    done = 0
    stop = time.perf_counter() + seconds

    async def loop(n: int) -> None:
        nonlocal done
        while time.perf_counter() < stop:
            handled = await op(n)  # not `done += await …`: that would lose concurrent updates
            done += handled

    start = time.perf_counter()
    await asyncio.gather(*(loop(n) for n in range(tasks)))
    return done / (time.perf_counter() - start)


def line(label: str, value: float, raw: float, unit: str = "msg/s") -> None:
    print(f"{label:<34} {value:>12,.0f} {unit:<6} ratio={value / raw:.2f}", flush=True)


def mem_available() -> int:
    """MemAvailable of /proc/meminfo in bytes (0 where unknown)."""
    with contextlib.suppress(OSError, ValueError), open("/proc/meminfo") as f:
        for row in f:
            if row.startswith("MemAvailable:"):
                return int(row.split()[1]) * 1024
    return 0


async def fill(engine: Engine, topic: str, count: int, per_call: int) -> None:
    """Append ``count`` messages to partition 0 of ``topic``, ``per_call`` per append call
    (each call one atomic append: one stream entry). The records are encoded once and
    appended as JMQ4 wire records are (checked, then stamped by each call)."""
    record, _ = encode_record(Message(BODY), app="a", partition=0, now_ms=engine.now_ms())
    wires = {per_call: engine.check_wire(record * per_call, per_call)}
    done = 0
    shown = time.perf_counter()
    while done < count:
        n = min(per_call, count - done)
        if n not in wires:
            wires[n] = engine.check_wire(record * n, n)
        await engine.append(topic, "a", wires[n], partition=0)
        done += n
        if time.perf_counter() - shown > 15:
            shown = time.perf_counter()
            print(f"  ... {topic}: {done:,} of {count:,} stored", flush=True)


async def aof_rewrite(client: aioredis.Redis) -> float:
    """Run an AOF rewrite now and wait for it to end; its seconds."""
    t0 = time.perf_counter()
    with contextlib.suppress(aioredis.ResponseError):  # one already running
        await client.bgrewriteaof()
    while True:
        info = await client.info("persistence")
        if not (info["aof_rewrite_in_progress"] or info["aof_rewrite_scheduled"]):
            return time.perf_counter() - t0
        await asyncio.sleep(0.2)


async def consume_pull(engine: Engine, topic: str, count: int) -> int:
    """Fetch 256 + ack (the pull path) until ``count`` messages came; how many."""
    got = 0
    while got < count:
        r = await engine.fetch(topic, "a", count=256, owner="bench")
        if not r.messages:
            break
        await engine.ack(topic, "a", r.partition, range(r.start, r.end), token=r.lock_token)
        got += sum(d.count for d in r.messages)
    return got


async def consume_leases(engine: Engine, topic: str, count: int) -> int:
    """Lease 256 + settle them (the consumer-group path) until ``count`` came; how many."""
    got = 0
    while got < count:
        lease = await engine.lease(topic, "g", count=256, owner="bench")
        if not lease.deliveries:
            break
        await engine.settle(topic, "g", lease.partition, [d.index for d in lease.deliveries])
        got += sum(d.count for d in lease.deliveries)
    return got


async def consume_vs_depth(
    engine: Engine, client: aioredis.Redis, args: argparse.Namespace
) -> dict[str, int]:
    """Consume msg/s over the last ``--region`` messages with 10^4 and ``--backlog``
    stored (see the module docstring); the partitions' end index after filling."""
    region, per_call = args.region, args.fill_per_call
    print(f"consume vs depth: {region:,} messages per pass, {args.passes} passes per figure")
    await client.config_set("auto-aof-rewrite-percentage", 0)
    t0 = time.perf_counter()
    await fill(engine, "small", region, 32)
    # a probe of the bulk layout: bytes per message, to check the backlog fits
    before = (await client.info("memory"))["used_memory"]
    probe = min(200_000, max(0, args.backlog - region))
    await fill(engine, "deep", probe, per_call)
    per_msg = ((await client.info("memory"))["used_memory"] - before) / max(1, probe)
    avail = mem_available()
    backlog = args.backlog
    need = backlog * per_msg
    print(
        f"memory: {per_msg:.0f} B per stored message in Redis; {backlog:,} messages need "
        f"about {need / 2**30:.2f} GiB; MemAvailable {avail / 2**30:.1f} GiB"
    )
    if avail and need > avail / 2:
        fits = int(avail / 2 / per_msg)
        magnitude = 10 ** (len(str(fits)) - 1)
        backlog = max(region + probe, fits // magnitude * magnitude)  # one significant digit
        print(
            f"NOTE: {args.backlog:,} messages do not fit in half the available memory: "
            f"the deep partition holds {backlog:,} instead"
        )
    await fill(engine, "deep", backlog - region - probe, per_call)
    await fill(engine, "deep", region, 32)
    filled = time.perf_counter() - t0
    rewrite = await aof_rewrite(client)
    await client.config_set("auto-aof-rewrite-percentage", 100)
    depths = {}
    for topic in ("small", "deep"):
        depths[topic] = (await engine.bounds(topic, 0))[1]
    info = await client.info("memory")
    xlen = await client.xlen(PartitionKeys("deep", 0).stream)
    print(
        f"filled through the engine in {filled:.0f}s: small {depths['small']:,} messages, deep "
        f"{depths['deep']:,} messages in {xlen:,} stream entries ({per_call} per append "
        f"call, the last {region:,} 32 per call); used_memory={info['used_memory_human']}; "
        f"then an AOF rewrite took {rewrite:.0f}s (auto rewrite off while filling)"
    )
    rates: dict[tuple[str, str], list[float]] = {}
    paths = (("pull fetch 256 + ack", consume_pull), ("group lease 256 + settle", consume_leases))
    for _ in range(args.passes):
        for label, consume in paths:
            app = "a" if consume is consume_pull else "g"
            for topic in ("small", "deep"):
                await engine.reset_offsets(topic, app, position=depths[topic] - region, partition=0)
                t = time.perf_counter()
                got = await consume(engine, topic, region)
                rate = got / (time.perf_counter() - t)
                if got < region:
                    print(f"  {label} {topic}: only {got:,} of {region:,} came")
                rates.setdefault((label, topic), []).append(rate)
    for label, _ in paths:
        small = statistics.median(rates[(label, "small")])
        deep = statistics.median(rates[(label, "deep")])
        ratio = deep / small
        print(
            f"{'consume ' + label:<30} {depths['small']:>10,} stored {small:>9,.0f} msg/s"
            f"  {depths['deep']:>10,} stored {deep:>9,.0f} msg/s  deep/small={ratio:.2f}"
            f"  goal within 10% (>= 0.90) {'met' if ratio >= 0.9 else 'NOT met'}"
        )
        for topic in ("small", "deep"):
            runs = " / ".join(f"{r:,.0f}" for r in rates[(label, topic)])
            print(f"    {topic} passes: {runs}")
    return depths


async def depth_costs(
    engine: Engine, topic: str, first: int, region: int, seconds: float
) -> tuple[float, float, float]:
    """append 100/call msg/s, random read 100/call msg/s and fetch 1 + ack p50 (ms), the
    reads within ``[first, first + region)`` (the part with the same layout at each depth:
    a read inside a bulk entry of thousands of records pays for the whole entry)."""
    msgs = [Message(BODY)] * 100
    append = await timed(1, seconds, lambda n: _append(engine, topic, msgs, 0))

    async def read(n: int) -> int:
        start = random.randrange(first, first + region - 200)
        got = await engine.read(topic, 0, start, 100)
        return sum(d.count for d in got)

    rd = await timed(1, seconds, read)
    await engine.reset_offsets(topic, "a", position=first, partition=0)
    lat = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        t0 = time.perf_counter()
        r = await engine.fetch(topic, "a", count=1, owner="b")
        if not r.messages or r.end > first + region:
            await engine.reset_offsets(topic, "a", position=first, partition=0)
            continue
        await engine.ack(topic, "a", r.partition, range(r.start, r.end), token=r.lock_token)
        lat.append((time.perf_counter() - t0) * 1000)
    return append, rd, statistics.median(lat)


async def _append(engine: Engine, topic: str, msgs: list[Message], partition: int) -> int:
    await engine.append(topic, "a", msgs, partition=partition)
    return len(msgs)


async def main(args: argparse.Namespace) -> None:
    workdir = Path(tempfile.mkdtemp(prefix="mqcloud-bench-"))
    proc, port = start_redis(workdir)
    try:
        payload = "x" * 100
        # the median of three runs (each printed): one run moved by ±15% from the next here
        runs = [redis_benchmark(port, "XADD", "raw:{s}", "*", "m", payload) for _ in range(3)]
        print("raw XADD runs (median used): " + " / ".join(f"{r:,.0f}" for r in runs))
        raw_xadd = statistics.median(runs)
        raw_xrange = 100 * redis_benchmark(
            port, "XRANGE", "raw:{s}", "-", "+", "COUNT", "100", n=20_000
        )
        print(
            f"redis-server {port}; AOF everysec; {args.tasks} client tasks; {args.seconds}s per figure"
        )
        print(f"{'raw redis-benchmark -P 100 XADD':<34} {raw_xadd:>12,.0f} msg/s  ratio=1.00")
        print(f"{'raw redis-benchmark XRANGE 100':<34} {raw_xrange:>12,.0f} msg/s  ratio=1.00")
        client = aioredis.from_url(f"redis://127.0.0.1:{port}/0", max_connections=64)
        engine = Engine(client, lambda: catalog(args.tasks))
        await client.delete("raw:{s}")

        single = [Message(BODY)]
        m32 = [Message(BODY)] * 32
        m100 = [Message(BODY)] * 100
        batch = [Message.batch([BatchItem(BODY)] * 100)]
        figures = {}
        for label, msgs, count in (
            ("append 1/call", single, 1),
            ("append 32/call", m32, 32),
            ("append 100/call", m100, 100),
            ("append batch=100", batch, 100),
        ):

            async def op(n: int, msgs=msgs, count=count) -> int:
                await engine.append("bench", "a", msgs, partition=n)
                return count

            figures[label] = await timed(args.tasks, args.seconds, op)
            line(label, figures[label], raw_xadd)
        for label, count in (("read 1/call", 1), ("read 32/call", 32), ("read 100/call", 100)):

            async def rop(n: int, count=count) -> int:
                start = random.randrange(0, 10_000)
                got = await engine.read("bench", 0, start, count)
                return sum(d.count for d in got) if count > 1 else 1

            line(label, await timed(args.tasks, args.seconds, rop), raw_xrange)
        # batch entries: the first partitions' tails hold batches of 100
        _, hi_b = await engine.bounds("bench", 1)

        async def rbatch(n: int) -> int:
            got = await engine.read("bench", 1, hi_b - 100 * random.randrange(1, 50), 100)
            return sum(d.count for d in got)

        line("read batch=100", await timed(args.tasks, args.seconds, rbatch), raw_xrange)

        lat = []
        await engine.reset_offsets("bench", "a", position="earliest")
        end = time.perf_counter() + args.seconds
        while time.perf_counter() < end:
            t0 = time.perf_counter()
            r = await engine.fetch("bench", "a", count=1, owner="b")
            await engine.ack("bench", "a", r.partition, range(r.start, r.end), token=r.lock_token)
            lat.append((time.perf_counter() - t0) * 1000)
        lat.sort()
        raw_rtt = 1000 / redis_benchmark(port, "PING", n=20_000) * 100  # ms per unpipelined req
        p50, p99 = lat[len(lat) // 2], lat[int(len(lat) * 0.99)]
        print(f"{'fetch+ack round trip p50':<34} {p50:>12.3f} ms     ({len(lat)} round trips)")
        print(f"{'fetch+ack round trip p99':<34} {p99:>12.3f} ms")
        del raw_rtt

        # consume rate and other costs vs backlog depth
        depths = await consume_vs_depth(engine, client, args)
        small = await depth_costs(
            engine, "small", depths["small"] - args.region, args.region, args.seconds
        )
        deep = await depth_costs(
            engine, "deep", depths["deep"] - args.region, args.region, args.seconds
        )
        for name, a, b, unit in (
            ("append 100/call", small[0], deep[0], "msg/s"),
            ("read 100/call (random start)", small[1], deep[1], "msg/s"),
            ("fetch 1 + ack p50", small[2], deep[2], "ms"),
        ):
            print(
                f"{name + ' @10^4 vs deep':<40} {a:>12,.1f} vs {b:>12,.1f} {unit}  deep/small={b / a:.2f}"
            )
        await engine.close()
        await client.aclose()
    finally:
        proc.kill()
        proc.wait()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backlog", type=int, default=10_000_000)
    parser.add_argument("--region", type=int, default=10_000, help="messages consumed per pass")
    parser.add_argument("--passes", type=int, default=7)
    parser.add_argument(
        "--fill-per-call", type=int, default=5000, help="messages per append call when filling"
    )
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--tasks", type=int, default=8)
    asyncio.run(main(parser.parse_args()))
