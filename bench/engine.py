"""Engine benchmark: append/read msg/s, fetch+ack latency, and cost vs backlog depth.

Starts its own redis-server (AOF on, appendfsync everysec) on a free port, measures the
raw Redis baseline with ``redis-benchmark -P 100`` (pipelined XADD, and XRANGE COUNT 100
for reads) in the same run, then the engine with 100-byte messages: one per call, 32 per
call, 100 per call and batch messages of 100 items. Every figure is printed on one line
with its ratio to the raw figure. Finally it compares append/read/fetch cost on a
partition holding 10^4 messages with one holding ``--backlog`` (default 10^7).

Durability: a second redis-server of the same run runs ``appendfsync always``
(``MQCLOUD_REDIS_APPENDFSYNC=always`` for `make run`); raw XADD (pipelined and one at a
time) and engine appends with qos RECEIVED and PERSISTED are measured on both servers
and printed with their ratio to the everysec figure (``--durability-only`` skips the rest).

    .venv/bin/python bench/engine.py [--backlog 10000000] [--per-entry 10] [--seconds 3]

The deep backlog is written straight into the engine's layout with pipelined XADD
(``--per-entry`` messages per stream entry, as one append call of that many stores them).
"""

from __future__ import annotations

import argparse
import asyncio
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
    QoS,
    TopicInfo,
)
from brokers.engine.append import pack_records
from brokers.engine.keys import PartitionKeys
from brokers.engine.record import RecordEncoder

BODY = b"x" * 100


def start_redis(datadir: Path, appendfsync: str = "everysec") -> tuple[subprocess.Popen, int]:
    """The benchmark's own redis-server (AOF, ``appendfsync``) on a free port."""
    server = RedisServer(datadir, free_port(), appendfsync=appendfsync)
    server.start()
    return server.process, server.port


def redis_benchmark(
    port: int, *command: str, n: int = 200_000, pipeline: int = 100, clients: int = 50
) -> float:
    out = subprocess.run(
        [
            "redis-benchmark",
            "-p",
            str(port),
            "-P",
            str(pipeline),
            "-c",
            str(clients),
            "-n",
            str(n),
            "-q",
            *command,
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    rates = re.findall(r"([\d.]+) requests per second", out)
    if not rates:
        raise RuntimeError(f"cannot parse redis-benchmark output: {out!r}")
    return float(rates[-1])


def catalog(partitions: int) -> CatalogSnapshot:
    topics = {
        code: TopicInfo(code=code, partitions=partitions) for code in ("bench", "small", "deep")
    }
    return CatalogSnapshot(
        version=1,
        topics=topics,
        producers=tuple(ProducerPolicyInfo(name=f"a.{c}", topic=c, app="a") for c in topics),
        consumers=tuple(ConsumerPolicyInfo(name=f"a.{c}", topic=c, app="a") for c in topics),
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


async def build_backlog(
    client: aioredis.Redis, engine: Engine, topic: str, total: int, per_entry: int
) -> None:
    """Fill partition 0 with ``total`` messages in the engine's layout, fast.

    Entries are what an append call of ``per_entry`` messages stores (one stream entry
    ``<first>-<n>`` of n records carrying their indexes), written with pipelined XADD
    instead of through the engine so that 10^7 messages take about a minute.
    """
    record, _ = RecordEncoder(app="a", partition=0, now_ms=engine.now_ms()).encode(Message(BODY))
    keys = PartitionKeys(topic, 0)
    entries = total // per_entry
    chunk = 2000
    cursor = 0

    async def worker() -> None:
        nonlocal cursor
        while cursor < entries:
            lo, cursor = cursor, min(entries, cursor + chunk)
            pipe = client.pipeline(transaction=False)
            for e in range(lo, cursor):
                first = e * per_entry
                blob = pack_records([(record, 1)] * per_entry, first)
                pipe.xadd(keys.stream, {"m": blob}, id=f"{first}-{per_entry}")
            await pipe.execute()

    await worker()  # one writer: stream ids must grow
    await client.hset(keys.meta, mapping={"next": entries * per_entry, "min": 0})


async def depth_costs(engine: Engine, topic: str, seconds: float) -> tuple[float, float, float]:
    """append 100/call msg/s, random read 100/call msg/s, fetch+ack p50 (ms) at depth."""
    lo, hi = await engine.bounds(topic, 0)
    msgs = [Message(BODY)] * 100
    append = await timed(1, seconds, lambda n: _append(engine, topic, msgs, 0))
    lo, hi = await engine.bounds(topic, 0)

    async def read(n: int) -> int:
        start = random.randrange(lo, hi - 200)
        got = await engine.read(topic, 0, start, 100)
        return sum(d.count for d in got)

    rd = await timed(1, seconds, read)
    await engine.reset_offsets(topic, "a", position=lo + (hi - lo) // 2, partition=0)
    lat = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        t0 = time.perf_counter()
        r = await engine.fetch(topic, "a", count=1, owner="b")
        await engine.ack(topic, "a", r.partition, range(r.start, r.end), token=r.lock_token)
        lat.append((time.perf_counter() - t0) * 1000)
    return append, rd, statistics.median(lat)


async def _append(engine: Engine, topic: str, msgs: list[Message], partition: int) -> int:
    await engine.append(topic, "a", msgs, partition=partition)
    return len(msgs)


async def durability_costs(args: argparse.Namespace, everysec_port: int, workdir: Path) -> None:
    """Raw XADD and engine appends (RECEIVED, PERSISTED) on everysec vs always."""
    proc, always_port = start_redis(workdir / "always", appendfsync="always")
    try:
        payload = "x" * 100
        print(f"durability: redis-server {everysec_port} everysec vs {always_port} always")
        base: dict[str, float] = {}
        for label, kwargs in (
            ("raw XADD -P 100", {"pipeline": 100}),
            ("raw XADD -P 1 (50 clients)", {"pipeline": 1, "n": 50_000}),
        ):
            for port, fsync in ((everysec_port, "everysec"), (always_port, "always")):
                rate = redis_benchmark(port, "XADD", "dur:{s}", "*", "m", payload, **kwargs)
                base.setdefault(label, rate)
                line(f"{label} {fsync}", rate, base[label])
        for port, fsync in ((everysec_port, "everysec"), (always_port, "always")):
            client = aioredis.from_url(f"redis://127.0.0.1:{port}/0", max_connections=64)
            engine = Engine(client, lambda: catalog(args.tasks))
            for qos in (QoS.RECEIVED, QoS.PERSISTED):
                for label, msgs in (("1/call", [Message(BODY)]), ("32/call", [Message(BODY)] * 32)):

                    async def op(n: int, msgs=msgs, qos=qos, engine=engine) -> int:
                        await engine.append("small", "a", msgs, partition=n, qos=qos)
                        return len(msgs)

                    key = f"append {label} {qos.name}"
                    rate = await timed(args.tasks, args.seconds, op)
                    base.setdefault(key, rate)
                    line(f"{key} {fsync}", rate, base[key])
            await engine.close()
            await client.aclose()
        print("(ratios: to the same figure on the everysec server)")
    finally:
        proc.kill()
        proc.wait()


async def main(args: argparse.Namespace) -> None:
    workdir = Path(tempfile.mkdtemp(prefix="mqcloud-bench-"))
    proc, port = start_redis(workdir)
    try:
        if args.durability_only:
            await durability_costs(args, port, workdir)
            return
        payload = "x" * 100
        raw_xadd = redis_benchmark(port, "XADD", "raw:{s}", "*", "m", payload)
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

        # cost vs backlog depth
        t0 = time.perf_counter()
        await build_backlog(client, engine, "small", 10_000, args.per_entry)
        await build_backlog(client, engine, "deep", args.backlog, args.per_entry)
        built = time.perf_counter() - t0
        _, hi = await engine.bounds("deep", 0)
        xlen = await client.xlen(PartitionKeys("deep", 0).stream)
        info = await client.info("memory")
        print(
            f"backlog built: small=10^4 messages, deep={hi:,} messages in {xlen:,} stream "
            f"entries ({args.per_entry} messages per append call) in {built:.0f}s; "
            f"used_memory={info['used_memory_human']}"
        )
        small = await depth_costs(engine, "small", args.seconds)
        deep = await depth_costs(engine, "deep", args.seconds)
        for name, a, b, unit in (
            ("append 100/call", small[0], deep[0], "msg/s"),
            ("read 100/call (random start)", small[1], deep[1], "msg/s"),
            ("fetch+ack p50", small[2], deep[2], "ms"),
        ):
            print(
                f"{name + ' @10^4 vs deep':<40} {a:>12,.1f} vs {b:>12,.1f} {unit}  deep/small={b / a:.2f}"
            )
        await engine.close()
        await client.aclose()
        await durability_costs(args, port, workdir)
    finally:
        proc.kill()
        proc.wait()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backlog", type=int, default=10_000_000)
    parser.add_argument(
        "--per-entry", type=int, default=10, help="messages per append call in the backlog"
    )
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--tasks", type=int, default=8)
    parser.add_argument(
        "--durability-only", action="store_true", help="only everysec vs always figures"
    )
    asyncio.run(main(parser.parse_args()))
