"""Producer statistics at fleet size: what counting costs an append, and what reading an
app's statistics costs when it produces to thousands of topics.

On its own throw-away Redis: ``--topics`` producers of one app, each with ``--hosts``
client hosts, count ``--appends`` appends each (:class:`ProduceLatencies`, as the engine
does at every append) and flush; then the app's statistics are read over the console's
three windows — the last hour (hour hashes), the last day (hour hashes) and 10 days (day
hashes) — each the median of ``--runs`` reads. The count per append is timed alone too
(the buffer only, no Redis): what every produce over every protocol pays for it. The raw
``redis-benchmark -P 100 XADD`` rate of the same Redis is printed first, as in every
benchmark here (no peer: the reference console's client-reported statistics have no
broker side to compare).

    .venv/bin/python bench/producer_stats.py [--topics 5000] [--hosts 3] [--runs 3]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import redis.asyncio as aioredis  # noqa: E402

from bench.harness import raw_xadd, redis_server  # noqa: E402
from brokers.engine.produce_latency import ProduceLatencies  # noqa: E402


async def measure(port: int, args: argparse.Namespace) -> None:
    client = aioredis.from_url(f"redis://127.0.0.1:{port}")
    stats = ProduceLatencies(client, time.time, interval_s=3600)  # flushed by hand here
    topics = [f"topic-{i}" for i in range(args.topics)]
    hosts = [f"10.0.{h}.1:{40000 + h}" for h in range(args.hosts)]
    started = time.perf_counter()
    n = 0
    for topic in topics:
        for host in hosts:
            for a in range(args.appends):
                stats.stored(topic, "app", host, 0.0005 * (a + 1), 1)
                n += 1
    counting = time.perf_counter() - started
    started = time.perf_counter()
    await stats.flush()
    flushing = time.perf_counter() - started
    print(
        f"counting: {n:,} appends in {counting:.2f} s ({counting / n * 1e6:.2f} µs each);"
        f" flush of {args.topics:,} producers x {args.hosts} hosts: {flushing:.2f} s",
        flush=True,
    )
    producers = [(t, "app") for t in topics]
    for label, hours in (("last hour", 1), ("last day", 24), ("10 days", 240)):
        times, rows = [], 0
        for _ in range(args.runs):
            started = time.perf_counter()
            rows = len(await stats.read(producers, hours))
            times.append(time.perf_counter() - started)
        print(
            f"read {label:9} (hours={hours:>3}): {statistics.median(times):6.2f} s"
            f" for {rows:,} (topic, host) rows",
            flush=True,
        )
    await client.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--topics", type=int, default=5000)
    parser.add_argument("--hosts", type=int, default=3)
    parser.add_argument("--appends", type=int, default=5)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with redis_server() as port:
        print(f"raw redis-benchmark -P 100 XADD: {raw_xadd(port, 300_000):,.0f} ops/s", flush=True)
        asyncio.run(measure(port, args))


if __name__ == "__main__":
    main()
