"""Redis CPU per consumer-group script call: what each lease and settle costs the server.

Redis runs every script on its one thread, so what a lease or a settle costs there bounds
what one Redis can serve, whatever the brokers in front of it do. This benchmark starts
its own redis-server (AOF on, appendfsync everysec), measures the raw ``XADD`` cost in
the same run (``redis-benchmark -P 100``: msg/s, and Redis's own µs per XADD), then
drives the engine's consumer-group path (zbus MQs, VibeMQ subscribers) through these
shapes, each on its own topic, and reads Redis's own accounting (``INFO commandstats``:
µs per EVALSHA, nested commands included) for each:

* **empty lease** — a consumer with nothing new (a parked long poll, an idle pump's
  recheck, or every process but one waking for one produce);
* **lease 1** / **settle 1** — one message at a time (a long poll without read-ahead),
  each stored by its own append (as RPC requests are);
* **lease 128** / **settle 128** — a streaming consumer's batch and its acks at once,
  stored 32 per append (as a busy producer's group commit stores them);
* **settle 1 of 128** — a batch leased at once and acked one by one (a long-polling
  client dealt from read-ahead);
* **settle 64 runs** — every other message of a batch of 128 acked in one call (competing
  sessions or processes acking interleaved messages of one range);
* **release 64 runs** — then the other half released in one call (that consumer's
  connection closed).

Every figure is µs of Redis CPU per call and, beside it, how many such calls one Redis
core could serve per second against the raw XADD rate.

    .venv/bin/python bench/group_scripts.py [--calls 4000]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))

import redis.asyncio as aioredis

from bench.engine import fill, redis_benchmark, start_redis
from brokers.engine import (
    CatalogSnapshot,
    ConsumerPolicyInfo,
    Engine,
    ProducerPolicyInfo,
    TopicInfo,
)

SHAPES = ("empty", "one", "batch", "one_of_batch", "sparse")


def catalog() -> CatalogSnapshot:
    """One single-partition topic per shape; app ``a`` produces (:func:`bench.engine.fill`),
    app ``g`` leases."""
    topics = {code: TopicInfo(code=code, partitions=1) for code in SHAPES}
    return CatalogSnapshot(
        version=1,
        topics=topics,
        producers=tuple(ProducerPolicyInfo(name=f"a.{c}", topic=c, app="a") for c in topics),
        consumers=tuple(ConsumerPolicyInfo(name=f"g.{c}", topic=c, app="g") for c in topics),
    )


async def evalsha_us(client: aioredis.Redis) -> tuple[int, float]:
    """EVALSHA calls and their total µs since the last reset."""
    stats = await client.info("commandstats")
    entry = stats.get("cmdstat_evalsha", {"calls": 0, "usec": 0})
    return int(entry["calls"]), float(entry["usec"])


class Meter:
    """Redis's µs per EVALSHA over a block of calls of one kind."""

    def __init__(self, client: aioredis.Redis) -> None:
        self.client = client
        self.figures: dict[str, float] = {}

    async def start(self) -> None:
        await self.client.config_resetstat()

    async def stop(self, label: str) -> None:
        calls, usec = await evalsha_us(self.client)
        self.figures[label] = usec / calls if calls else 0.0


async def measure(engine: Engine, client: aioredis.Redis, calls: int) -> dict[str, float]:
    meter = Meter(client)
    # empty: a consumer that is caught up asks again
    await fill(engine, "empty", 10, 10)
    first = await engine.lease("empty", "g", count=128, owner="bench")
    await engine.settle("empty", "g", first.partition, [d.index for d in first.deliveries])
    await meter.start()
    for _ in range(calls):
        await engine.lease("empty", "g", count=128, owner="bench")
    await meter.stop("empty lease")

    # one at a time (each stored by its own append, as RPC requests come), then a batch at
    # a time (stored 32 per append, as a busy producer's group commit stores them)
    batches = max(1, calls // 32)
    for topic, count, times, per_append in (("one", 1, calls, 1), ("batch", 128, batches, 32)):
        await fill(engine, topic, count * times, per_append)
        await meter.start()
        leases = [await engine.lease(topic, "g", count=count, owner="bench") for _ in range(times)]
        await meter.stop(f"lease {count}")
        await meter.start()
        for lease in leases:
            await engine.settle(topic, "g", lease.partition, [d.index for d in lease.deliveries])
        await meter.stop(f"settle {count}")

    # a batch leased at once, acked one by one (in order, as a long poller takes them)
    await fill(engine, "one_of_batch", batches * 128, 32)
    usec_total, calls_total = 0.0, 0
    for _ in range(batches):
        lease = await engine.lease("one_of_batch", "g", count=128, owner="bench")
        await meter.start()
        for d in lease.deliveries:
            await engine.settle("one_of_batch", "g", lease.partition, [d.index])
        n, us = await evalsha_us(client)
        usec_total, calls_total = usec_total + us, calls_total + n
    meter.figures["settle 1 of 128"] = usec_total / calls_total if calls_total else 0.0

    # every other message of a batch in one call: 64 runs of one
    await fill(engine, "sparse", batches * 128, 32)
    leases = [await engine.lease("sparse", "g", count=128, owner="bench") for _ in range(batches)]
    await meter.start()
    for lease in leases:
        indexes = [d.index for d in lease.deliveries][::2]
        await engine.settle("sparse", "g", lease.partition, indexes)
    await meter.stop("settle 64 runs")
    await meter.start()
    for lease in leases:
        indexes = [d.index for d in lease.deliveries][1::2]
        await engine.release("sparse", "g", lease.partition, indexes)
    await meter.stop("release 64 runs")
    return meter.figures


async def main(args: argparse.Namespace) -> None:
    workdir = Path(tempfile.mkdtemp(prefix="mqcloud-bench-"))
    proc, port = start_redis(workdir)
    try:
        client = aioredis.from_url(f"redis://127.0.0.1:{port}/0")
        raw = redis_benchmark(port, "XADD", "raw:{s}", "*", "m", "x" * 100)
        await client.config_resetstat()
        await asyncio.to_thread(redis_benchmark, port, "XADD", "raw:{s}", "*", "m", "x" * 100)
        stats = await client.info("commandstats")
        xadd_us = float(stats["cmdstat_xadd"]["usec_per_call"])
        await client.delete("raw:{s}")
        snap = catalog()
        engine = Engine(client, lambda: snap)
        figures = await measure(engine, client, args.calls)
        print(f"redis-server {port}; AOF everysec; {args.calls} calls per shape")
        print(f"{'raw redis-benchmark -P 100 XADD':<28} {raw:>10,.0f} msg/s")
        print(f"{'raw XADD, Redis µs per call':<28} {xadd_us:>10.2f} µs")
        print(
            f"{'script call':<28} {'Redis µs':>10} {'calls/s per core':>18} {'vs raw XADD/s':>14}"
        )
        for label, us in figures.items():
            per_core = 1e6 / us if us else 0.0
            print(f"{label:<28} {us:>10.1f} {per_core:>18,.0f} {per_core / raw:>13.2f}x")
        await engine.close()
        await client.aclose()
    finally:
        proc.terminate()
        proc.wait(10)
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=4000, help="script calls per shape")
    asyncio.run(main(parser.parse_args()))
