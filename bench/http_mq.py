"""Benchmark of the HTTP-MQ proxy: produce and fetch+ack requests per second.

Starts its own redis-server (AOF, appendfsync everysec) and one daphne web process on free
loopback ports, publishes a catalog snapshot straight to Redis (no PostgreSQL needed), then
measures with httpx over keep-alive connections:

- produce requests/s, one message per request and a batch of 32 per request;
- fetch+ack requests/s with 8 concurrent consumers (each fetch acks the previous batch);

and, in the same run, ``redis-benchmark`` pipelined XADD as the raw baseline. Every line
carries its ratio to the raw figure. Usage: ``.venv/bin/python bench/http_mq.py [--seconds 5]``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import orjson
import redis.asyncio as aioredis

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from localservices import RedisServer, free_port, wait_for_port  # noqa: E402

from bench.harness import raw_xadd  # noqa: E402
from brokers.engine import (  # noqa: E402
    AppInfo,
    BrokerInfo,
    CatalogSnapshot,
    ConsumerPolicyInfo,
    PartitionGroupInfo,
    ProducerPolicyInfo,
    TopicInfo,
    publish_snapshot,
)
from brokers.engine.catalog import hash_token  # noqa: E402

TOKEN = "bench-token"
BODY = "x" * 100


def snapshot() -> CatalogSnapshot:
    broker = BrokerInfo(id=1, host="127.0.0.1", jmq4_port=1, zbus_port=2, vibemq_port=3)
    topic = TopicInfo(
        code="bench",
        partitions=8,
        groups=(PartitionGroupInfo(group_id=0, leader=1, partitions=tuple(range(8))),),
    )
    return CatalogSnapshot(
        version=1,
        brokers={1: broker},
        topics={"bench": topic},
        apps={"bench-app": AppInfo(code="bench-app", token_hashes=(hash_token(TOKEN),))},
        producers=(
            ProducerPolicyInfo(name="p", topic="bench", app="bench-app", http_enabled=True),
        ),
        consumers=(
            ConsumerPolicyInfo(
                name="c",
                topic="bench",
                app="bench-app",
                http_enabled=True,
                start_position="earliest",
                batch_size=32,
            ),
        ),
    )


async def timed(seconds: float, workers: int, one) -> float:
    done = 0
    stop = time.monotonic() + seconds

    async def worker(i: int) -> None:
        nonlocal done
        while time.monotonic() < stop:
            n = await one(i)  # not `done += await …`: that reads `done` before awaiting
            done += n

    started = time.monotonic()
    await asyncio.gather(*(worker(i) for i in range(workers)))
    return done / (time.monotonic() - started)


async def run(base: str, seconds: float) -> dict[str, float]:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    limits = httpx.Limits(max_connections=16, max_keepalive_connections=16)
    async with httpx.AsyncClient(
        base_url=base, headers=headers, limits=limits, timeout=30
    ) as client:

        async def single(_: int) -> int:
            r = await client.post("/mq/produce", data={"producer": "p", "message": BODY})
            assert r.status_code == 200, r.text
            return 1

        batch = orjson.dumps([BODY] * 32).decode()

        async def batched(_: int) -> int:
            r = await client.post("/mq/produce/batch", data={"producer": "p", "messages": batch})
            assert r.status_code == 200, r.text
            return 1

        rids: dict[int, str | None] = {}

        async def consume(i: int) -> int:
            params = {"topic": "bench", "consumer": "c"}
            if rids.get(i):
                params["requestId"] = rids[i]
            r = await client.get("/mq/message", params=params)
            if r.status_code == 503:
                rids[i] = None
                return 1
            rids[i] = r.json()["result"].get("requestId")
            return 1

        figures = {
            "produce single req/s (4 clients)": await timed(seconds, 4, single),
            "produce batch=32 req/s (4 clients)": await timed(seconds, 4, batched),
        }
        figures["fetch+ack req/s (8 clients)"] = await timed(seconds, 8, consume)
        return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="mqcloud-bench-"))
    redis = RedisServer(workdir / "redis", free_port())
    redis.start()
    web_port = free_port()
    web = None
    try:

        async def seed() -> None:
            client = aioredis.from_url(redis.url)
            await publish_snapshot(client, snapshot())
            await client.aclose()

        asyncio.run(seed())
        env = {**os.environ, "REDIS_URL": redis.url, "DEBUG": "false"}
        web = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "daphne",
                "-b",
                "127.0.0.1",
                "-p",
                str(web_port),
                "mqcloud.asgi:application",
            ],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_for_port(web_port, timeout=30)
        raw = raw_xadd(redis.port, 200_000)
        figures = asyncio.run(run(f"http://127.0.0.1:{web_port}", args.seconds))
        print(f"raw redis XADD pipelined (-P 100)  {raw:,.0f} ops/s  ratio=1.00")
        for name, value in figures.items():
            print(f"{name:<36} {value:,.0f}  ratio={value / raw:.4f}")
        print("(batch requests carry 32 messages each: messages/s = req/s × 32)")
    finally:
        if web is not None:
            web.terminate()
            web.wait(timeout=10)
        redis.stop()


if __name__ == "__main__":
    main()
