"""Retention at fleet size: what the every-minute trim costs (a script, not a test):
``python bench/retention.py [--topics 5000] [--partitions 4] [--messages 10]``.

Starts its own redis-server on a free port and an engine on it, with a catalog of
``--topics`` topics of ``--partitions`` partitions, half keeping the last half of their
messages (``retention_max_count``), half keeping an hour (``retention_max_age_s``). Each
is consumed by a clustering consumer that read one message of every partition and by
one that never started, and every partition holds ``--messages`` messages appended one
by one (so a cut can fall between any two). It times ``Engine.trim_all`` — the first
pass, which trims half the fleet and counts what the consumers lost, and then the
pass every minute runs once nothing is due — against the same trims run one topic per
round trip (``Engine.trim`` topic by topic), and checks the losses counted. The raw
Redis baseline (pipelined XADD) of the same run is printed first, as in every benchmark
here.
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

RUNS = 5
APPENDS_IN_FLIGHT = 256


def catalog(topics: int, partitions: int, messages: int) -> CatalogSnapshot:
    """Topics ``t<i>`` produced by app ``p`` and consumed by ``reader`` and ``idle``."""
    infos = {}
    for i in range(topics):
        limit = (
            {"retention_max_count": messages // 2} if i % 2 == 0 else {"retention_max_age_s": 3_600}
        )
        infos[f"t{i}"] = TopicInfo(code=f"t{i}", partitions=partitions, **limit)
    return CatalogSnapshot(
        version=1,
        brokers={},
        topics=infos,
        producers=tuple(ProducerPolicyInfo(name=f"p.{c}", topic=c, app="p") for c in infos),
        consumers=tuple(
            ConsumerPolicyInfo(name=f"{app}.{c}", topic=c, app=app)
            for c in infos
            for app in ("reader", "idle")
        ),
    )


async def fill(engine: Engine, topics: int, partitions: int, messages: int) -> None:
    """``messages`` appends of one message to every partition, then ``reader`` reads and
    commits one message of each."""
    pending: set[asyncio.Task] = set()

    async def each(call) -> None:
        pending.add(asyncio.ensure_future(call))
        if len(pending) >= APPENDS_IN_FLIGHT:
            done, _ = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            pending.difference_update(done)

    for i in range(topics):
        for p in range(partitions):
            for _ in range(messages):
                await each(engine.append(f"t{i}", "p", [Message(b"x")], partition=p))
    await asyncio.gather(*pending)
    pending.clear()

    async def read_one(topic: str) -> None:
        for _ in range(partitions):
            got = await engine.fetch(topic, "reader", count=1)
            await engine.commit(
                topic,
                "reader",
                got.partition,
                offset=got.start,
                next_offset=got.end,
                lock_time=got.lock_token,
            )

    for i in range(topics):
        await each(read_one(f"t{i}"))
    await asyncio.gather(*pending)


async def timed(call, runs: int = RUNS) -> float:
    """Median milliseconds of ``runs`` awaits of ``call()``."""
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        await call()
        times.append((time.perf_counter() - started) * 1000)
    return sorted(times)[len(times) // 2]


async def main(port: int, args: argparse.Namespace) -> None:
    client = broker_client(f"redis://127.0.0.1:{port}", max_connections=8)
    snap = catalog(args.topics, args.partitions, args.messages)
    engine = Engine(client, lambda: snap)
    started = time.perf_counter()
    await fill(engine, args.topics, args.partitions, args.messages)
    parts = args.topics * args.partitions
    print(f"{args.topics:,} topics x {args.partitions} partitions x {args.messages} messages, "
          f"2 consumers each, ready in {time.perf_counter() - started:.1f} s", flush=True)  # fmt: skip
    codes = list(snap.topics)

    async def topic_by_topic() -> None:
        for code in codes:
            await engine.trim(code)

    started = time.perf_counter()
    mins = await engine.trim_all()
    first_ms = (time.perf_counter() - started) * 1000
    kept = args.messages - args.messages // 2
    trimmed = sum(1 for code, by_p in mins.items() for m in by_p.values() if m == kept)
    assert trimmed == (args.topics + 1) // 2 * args.partitions, trimmed
    losses = await engine.retention_losses()
    per_topic = (args.messages // 2 - 1) * args.partitions  # reader stood at 1 of each
    assert set(losses.values()) == {per_topic}, set(losses.values())
    assert len(losses) == (args.topics + 1) // 2 and all(a == "reader" for _, a in losses)
    print(f"  trim_all, first pass ({trimmed:,} of {parts:,} partitions trimmed, losses of "
          f"{len(losses):,} consumers counted as planted): {first_ms:8.1f} ms")  # fmt: skip
    idle_all = await timed(engine.trim_all)
    idle_each = await timed(topic_by_topic)
    print(f"  nothing due, {parts:,} partitions, trim_all:                  {idle_all:8.1f} ms")
    print(f"  nothing due, {parts:,} partitions, one topic per round trip:  {idle_each:8.1f} ms")
    print(f"  ratio one topic per round trip / trim_all: {idle_each / idle_all:.1f}x")
    await engine.close()
    await client.aclose()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topics", type=int, default=5_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--messages", type=int, default=10)
    arguments = parser.parse_args()
    with redis_server() as redis_port:
        print(f"raw redis-benchmark -P 100 XADD: {raw_xadd(redis_port, 200_000):,.0f} ops/s")
        asyncio.run(main(redis_port, arguments))
