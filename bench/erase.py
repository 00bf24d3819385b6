"""Erasing one deleted topic in a Redis that holds a fleet (a script, not a test).

``python bench/erase.py [--topics 5000] [--partitions 8] [--groups 3]`` fills a throw-away
redis-server with the keys of ``--topics`` topics (per partition: stream, meta, append
request ids and three progress keys per group; per group: a retry store and a group
registry key — one small value each, the number of keys is what a scan pays for), then
times the engine's ``erase_topic`` of one of them (:mod:`brokers.engine.erase`: one
``SCAN`` with the topic's pattern, ``UNLINK``) and, in the same run, the raw baseline: one
``SCAN`` of every key without a pattern. The erase should cost about that scan — it is
O(keys in Redis), an operator's rare action, never on a message path.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

import redis.asyncio as aioredis

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.harness import redis_server
from brokers.engine import CatalogSnapshot, Engine
from brokers.engine.keys import GroupKeys, PartitionKeys, RetryKeys


async def fill(client: aioredis.Redis, topics: int, partitions: int, groups: int) -> None:
    pipe = client.pipeline(transaction=False)
    queued = 0
    for t in range(topics):
        code = f"topic-{t}"
        apps = [f"app{g}" for g in range(groups)]
        for p in range(partitions):
            k = PartitionKeys(code, p)
            keys = [k.stream, k.meta, k.requests]
            keys += [key for a in apps for key in (k.state(a), k.ranges(a), k.range_starts(a))]
            for key in keys:
                pipe.set(key, b"x")
        for a in apps:
            pipe.set(RetryKeys(code, a).due, b"x")
            pipe.set(GroupKeys(code, a).clients, b"x")
        queued += partitions * (3 + 3 * groups) + 2 * groups
        if queued >= 20_000:
            await pipe.execute()
            pipe, queued = client.pipeline(transaction=False), 0
    await pipe.execute()


async def run(port: int, topics: int, partitions: int, groups: int) -> None:
    client = aioredis.from_url(f"redis://127.0.0.1:{port}")
    engine = Engine(client, lambda: CatalogSnapshot(version=1))
    try:
        await fill(client, topics, partitions, groups)
        total = await client.dbsize()
        started = time.perf_counter()
        scanned = sum([1 async for _ in client.scan_iter(count=1000)])
        raw_s = time.perf_counter() - started
        started = time.perf_counter()
        erased = await engine.erase_topic(f"topic-{topics // 2}")
        erase_s = time.perf_counter() - started
        left = await client.dbsize()
    finally:
        await engine.close()
        await client.aclose()
    print(f"keys in Redis                   {total:>12,}")
    print(f"raw SCAN of every key           {raw_s * 1000:>9.0f} ms  ({scanned:,} keys)")
    print(f"erase_topic of one topic        {erase_s * 1000:>9.0f} ms  ({erased} keys erased)")
    print(f"erase / raw scan                {erase_s / raw_s:>12.2f}")
    assert left == total - erased


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topics", type=int, default=5000)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--groups", type=int, default=3)
    args = parser.parse_args()
    with redis_server() as port:
        asyncio.run(run(port, args.topics, args.partitions, args.groups))


if __name__ == "__main__":
    main()
