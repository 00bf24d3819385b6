"""VibeMQ broker benchmark (a script, not a test): ``python bench/vibemq.py``.

Starts its own redis-server (AOF everysec) and a VibeMQ server in a separate process
(``--serve``) with queues pre-declared in a catalog snapshot, then prints:

* publish-with-ack msgs/s — 100-byte JSON payloads, 4 connections, 64 publishes in flight each
  (every publishAck means the message is stored);
* deliver-with-ack msgs/s — one subscriber acking every delivery over the published backlog;
* publish→deliver latency p50/p99 at a paced 500 msg/s;
* the raw baseline: ``redis-benchmark -P 100 -q XADD`` on the same Redis, in the same run.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


from bench.harness import broker_bench, serve_broker
from brokers.clients.vibemq import VibeMQClient
from brokers.engine import (
    AppInfo,
    CatalogSnapshot,
    QueueSettings,
    TopicInfo,
)
from brokers.engine.catalog import hash_token
from brokers.servers.jmq4 import install_uvloop
from brokers.servers.vibemq import start_vibemq_server

TOKEN = "bench-token"
PAYLOAD = {"data": "x" * 88}  # about 100 bytes of JSON


def snapshot() -> CatalogSnapshot:
    big = QueueSettings(max_queue_size=10_000_000)
    return CatalogSnapshot(
        version=1,
        topics={q: TopicInfo(code=q, partitions=1, queue=big) for q in ("bench", "latency")},
        apps={"bench": AppInfo(code="bench", token_hashes=(hash_token(TOKEN),))},
    )


async def publish_load(port: int, seconds: float, conns: int = 4, window: int = 64) -> float:
    clients = [await VibeMQClient.open("127.0.0.1", port, TOKEN) for _ in range(conns)]
    stop = time.monotonic() + seconds
    counts = [0] * conns

    async def worker(i: int) -> None:
        client = clients[i]
        while time.monotonic() < stop:
            await asyncio.gather(*(client.publish("bench", PAYLOAD) for _ in range(window)))
            counts[i] += window

    started = time.monotonic()
    await asyncio.gather(*(worker(i) for i in range(conns)))
    elapsed = time.monotonic() - started
    for c in clients:
        await c.close()
    return sum(counts) / elapsed


async def deliver_load(port: int, total: int) -> float:
    client = await VibeMQClient.open("127.0.0.1", port, TOKEN)
    await client.subscribe("bench")
    started = time.monotonic()
    for _ in range(total):
        m = await client.receive(30)
        client.ack(m.id)
    elapsed = time.monotonic() - started
    await client.close()
    return total / elapsed


async def latency(port: int, rate: int, seconds: float) -> tuple[float, float]:
    pub = await VibeMQClient.open("127.0.0.1", port, TOKEN)
    sub = await VibeMQClient.open("127.0.0.1", port, TOKEN)
    await sub.subscribe("latency")
    samples: list[float] = []
    n = int(rate * seconds)

    async def consume() -> None:
        for _ in range(n):
            m = await sub.receive(30)
            sub.ack(m.id)
            samples.append((time.time() - m.payload["t"]) * 1000)

    task = asyncio.create_task(consume())
    start = time.monotonic()
    pending = set()
    for i in range(n):
        delay = start + i / rate - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        pending.add(asyncio.create_task(pub.publish("latency", {"t": time.time()})))
    await asyncio.gather(*pending)
    await task
    await pub.close()
    await sub.close()
    cuts = statistics.quantiles(samples, n=100)
    return cuts[49], cuts[98]


async def main() -> None:
    with broker_bench(__file__, 1_000_000) as (raw, _, port):
        publish = await publish_load(port, 5.0)
        backlog = min(int(publish * 5), 100_000)
        deliver = await deliver_load(port, backlog)
        p50, p99 = await latency(port, 500, 5.0)
        print(f"raw redis-benchmark -P 100 XADD  : {raw:12,.0f} ops/s   1.00x")
        print(
            f"VibeMQ publish+ack, 4 conns      : {publish:12,.0f} msg/s   {publish / raw:.3f}x raw"
        )
        print(
            f"VibeMQ deliver+ack, 1 subscriber : {deliver:12,.0f} msg/s   {deliver / raw:.3f}x raw"
        )
        print(f"VibeMQ publish→deliver @500/s    : p50 {p50:.2f} ms  p99 {p99:.2f} ms")


if __name__ == "__main__":
    install_uvloop()
    if len(sys.argv) == 4 and sys.argv[1] == "--serve":
        asyncio.run(
            serve_broker(int(sys.argv[2]), int(sys.argv[3]), snapshot(), start_vibemq_server)
        )
    else:
        asyncio.run(main())
