"""Measuring lags at fleet size, broadcast clients included (a script, not a test):
``python bench/client_lags.py [--consumers 500] [--clients 20] [--partitions 4]``.

Starts its own redis-server on a free port and an engine on it, with a catalog of
``--consumers`` topics of ``--partitions`` partitions, each consumed by one broadcast
consumer with ``--clients`` registered clients (and, for comparison, as many clustering
consumers), each partition holding a few messages. It times ``Engine.group_lags`` — what
a console or API page of consumers and each backlog-check batch costs — for a page of 50
consumers and for all of them, ``Engine.forget_idle_clients`` with nobody idle (the
hourly sweep's usual cost), and the progress of all clustering consumers (what the
blocked-consumer check reads every 30 s) read one consumer per round trip and with
``Engine.groups_progress``, 500 per round trip as the check does. The raw Redis baseline
(pipelined XADD) of the same run is printed first, as in every benchmark here.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.harness import raw_xadd, redis_server
from brokers.engine import (
    CatalogSnapshot,
    ConsumerPolicyInfo,
    Engine,
    Message,
    ProducerPolicyInfo,
    TopicInfo,
    broker_client,
)
from brokers.engine.keys import GroupKeys

PAGE = 50
RUNS = 5


def catalog(consumers: int, partitions: int) -> CatalogSnapshot:
    """``b<i>`` topics consumed by broadcast, ``c<i>`` by clustering, app ``a``."""
    codes = [f"{kind}{i}" for kind in "bc" for i in range(consumers)]
    return CatalogSnapshot(
        version=1,
        brokers={},
        topics={code: TopicInfo(code=code, partitions=partitions) for code in codes},
        producers=tuple(ProducerPolicyInfo(name=f"a.{c}", topic=c, app="a") for c in codes),
        consumers=tuple(
            ConsumerPolicyInfo(name=f"a.{c}", topic=c, app="a", broadcast=c.startswith("b"))
            for c in codes
        ),
    )


async def timed(call, runs: int = RUNS) -> float:
    """Median milliseconds of ``runs`` awaits of ``call()`` after one warm-up."""
    await call()
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        await call()
        times.append((time.perf_counter() - started) * 1000)
    return sorted(times)[len(times) // 2]


async def main(port: int, args: argparse.Namespace) -> None:
    client = broker_client(f"redis://127.0.0.1:{port}", max_connections=8)
    snap = catalog(args.consumers, args.partitions)
    engine = Engine(client, lambda: snap)
    for i in range(args.consumers):
        for kind in "bc":
            for p in range(args.partitions):
                await engine.append(f"{kind}{i}", "a", [Message(b"x")] * 3, partition=p)
    now = engine.now_ms()
    pipe = client.pipeline(transaction=False)
    for i in range(args.consumers):  # what a fetch with a clientId registers
        pipe.zadd(
            GroupKeys(f"b{i}", "a").clients, {f"client-{n}": now for n in range(args.clients)}
        )
    await pipe.execute()
    broadcast = [(f"b{i}", "a") for i in range(args.consumers)]
    clustering = [(f"c{i}", "a") for i in range(args.consumers)]
    per = args.clients * args.partitions
    print(f"{args.consumers} broadcast consumers of {args.clients} clients, {args.consumers}"
          f" clustering consumers, {args.partitions} partitions each", flush=True)  # fmt: skip
    for label, groups, slots in (
        (f"page of {PAGE} broadcast", broadcast[:PAGE], PAGE * per),
        (f"all {args.consumers} broadcast", broadcast, args.consumers * per),
        (f"page of {PAGE} clustering", clustering[:PAGE], PAGE * args.partitions),
        (f"all {args.consumers} clustering", clustering, args.consumers * args.partitions),
    ):
        ms = await timed(lambda g=groups: engine.group_lags(g))
        print(f"  group_lags, {label:28} {slots:>8,} progresses x partitions  {ms:8.1f} ms")
    ms = await timed(lambda: engine.forget_idle_clients(idle_ms=30 * 86_400_000))
    print(f"  forget_idle_clients, nobody idle{'':22}{ms:8.1f} ms")

    async def one_by_one() -> None:
        for topic, app in clustering:
            await engine.progress(topic, app)

    async def batched() -> None:
        for at in range(0, len(clustering), 500):
            await engine.groups_progress(clustering[at : at + 500])

    for label, call in (
        ("one consumer per round trip", one_by_one),
        ("500 per round trip", batched),
    ):
        ms = await timed(call)
        print(f"  progress of all {args.consumers} clustering, {label:27} {ms:8.1f} ms")
    await engine.close()
    await client.aclose()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--consumers", type=int, default=500)
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--partitions", type=int, default=4)
    arguments = parser.parse_args()
    with redis_server() as redis_port:
        print(f"raw redis-benchmark -P 100 XADD: {raw_xadd(redis_port, 200_000):,.0f} ops/s")
        asyncio.run(main(redis_port, arguments))
