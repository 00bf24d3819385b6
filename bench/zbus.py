"""zbus broker benchmark (a script, not a test): ``python bench/zbus.py``.

Starts its own redis-server (free port, AOF everysec) and a zbus server in a separate
process (``--serve``) with a minimal catalog snapshot published to that Redis, then prints:

* produce msgs/s — 100-byte messages, 128 pipelined per connection, on 1 and 8 connections;
* consume msgs/s — ``window: -1`` streaming over the produced backlog, on 1 and 8 connections;
* RPC round trips/s — 8 requester connections (32 requests in flight each) through a
  service MQ served by 4 worker connections;
* the raw baseline: ``redis-benchmark -P 100 -q XADD`` on the same Redis, in the same run.

Each line shows its ratio to the raw XADD rate.
"""

from __future__ import annotations

import asyncio
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import redis.asyncio as aioredis

from bench.harness import broker_bench, serve_broker
from brokers.engine import (
    BrokerInfo,
    CatalogSnapshot,
    Engine,
    PartitionGroupInfo,
    QueueSettings,
    TopicInfo,
)
from brokers.protocols.zbus import Decoder, Message, RequestLine, encode_message
from brokers.servers.jmq4 import install_uvloop
from brokers.servers.zbus import start_zbus_server

BODY = b"x" * 100
IN_FLIGHT = 128


def snapshot(port: int) -> CatalogSnapshot:
    group = (PartitionGroupInfo(group_id=0, leader=1, partitions=(0,)),)
    queue = QueueSettings(max_queue_size=10_000_000, overflow_policy="BlockPublisher")
    topics = {
        f"bench{i}": TopicInfo(
            code=f"bench{i}", partitions=1, groups=group, queue=queue, zbus_mode=1
        )
        for i in range(8)
    }
    topics["svc"] = TopicInfo(code="svc", partitions=1, groups=group, queue=queue, zbus_mode=1)
    broker = BrokerInfo(id=1, host="127.0.0.1", jmq4_port=0, zbus_port=port, vibemq_port=0)
    return CatalogSnapshot(version=1, brokers={1: broker}, topics=topics)


def encode(headers: dict[str, str], body: bytes = b"") -> bytes:
    return encode_message(Message(RequestLine(), headers, body))


class Conn:
    """A bare pipelining connection: write bytes, count decoded messages."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer, self.decoder = reader, writer, Decoder()

    @classmethod
    async def open(cls, port: int) -> Conn:
        return cls(*await asyncio.open_connection("127.0.0.1", port))

    async def messages(self) -> list[Message]:
        data = await self.reader.read(1 << 20)
        if not data:
            raise ConnectionError("closed")
        return [e for e in self.decoder.feed(data) if isinstance(e, Message)]

    def close(self) -> None:
        self.writer.close()


async def produce_load(port: int, conns: int, seconds: float) -> tuple[float, int]:
    async def worker(i: int, stop: float) -> int:
        conn = await Conn.open(port)
        frame = encode({"cmd": "produce", "mq": f"bench{i}", "msgid": "p"}, BODY)
        acked, sent = 0, IN_FLIGHT
        conn.writer.write(frame * IN_FLIGHT)
        while acked < sent:
            got = len(await conn.messages())
            acked += got
            if time.perf_counter() < stop:
                conn.writer.write(frame * got)
                sent += got
        conn.close()
        return acked

    stop = time.perf_counter() + seconds
    start = time.perf_counter()
    counts = await asyncio.gather(*(worker(i, stop) for i in range(conns)))
    return sum(counts) / (time.perf_counter() - start), sum(counts)


async def consume_load(port: int, conns: int, totals: list[int]) -> float:
    async def worker(i: int) -> int:
        conn = await Conn.open(port)
        conn.writer.write(
            encode({"cmd": "consume", "mq": f"bench{i}", "msgid": "c", "window": "-1"})
        )
        got = 0
        while got < totals[i]:
            try:
                got += len(await asyncio.wait_for(conn.messages(), 5))
            except TimeoutError:
                print(f"consumer {i} stuck at {got}/{totals[i]}", file=sys.stderr, flush=True)
                break
        conn.close()
        return got

    start = time.perf_counter()
    counts = await asyncio.gather(*(worker(i) for i in range(conns)))
    return sum(counts) / (time.perf_counter() - start)


async def rpc_load(port: int, seconds: float, requesters: int = 8, workers: int = 4) -> float:
    async def serve_calls() -> None:
        conn = await Conn.open(port)
        conn.writer.write(encode({"cmd": "consume", "mq": "svc", "msgid": "w", "window": "-1"}))
        try:
            while True:
                out = []
                for call in await conn.messages():
                    headers = {"cmd": "produce", "mq": call.mq_reply or "", "ack": "0"}
                    headers["msgid"] = call.msgid_raw or ""
                    out.append(encode(headers, call.body))
                conn.writer.write(b"".join(out))
        except (ConnectionError, asyncio.CancelledError):
            conn.close()

    async def call(stop: float) -> int:
        conn = await Conn.open(port)
        reply_q = str(uuid.uuid4())
        frames = {
            f"r{n}": encode(
                {"cmd": "request", "mq": "svc", "msgid": f"r{n}", "mq_reply": reply_q}, BODY
            )
            for n in range(32)
        }
        conn.writer.write(b"".join(frames.values()))
        done, sent = 0, 32
        while done < sent:
            replies = await conn.messages()
            done += len(replies)
            if time.perf_counter() < stop:
                conn.writer.write(b"".join(frames[r.msgid or ""] for r in replies))
                sent += len(replies)
        conn.close()
        return done

    servers = [asyncio.create_task(serve_calls()) for _ in range(workers)]
    await asyncio.sleep(0.3)
    stop = time.perf_counter() + seconds
    start = time.perf_counter()
    counts = await asyncio.gather(*(call(stop) for _ in range(requesters)))
    elapsed = time.perf_counter() - start
    for task in servers:
        task.cancel()
    return sum(counts) / elapsed


async def main() -> None:
    with broker_bench(__file__, 500_000) as (raw, redis_port, port):
        p1, n1 = await produce_load(port, 1, 4.0)
        print(f"produce 1: {p1:.0f} ({n1})", file=sys.stderr, flush=True)
        c1 = await consume_load(port, 1, [n1])
        print(f"consume 1: {c1:.0f}", file=sys.stderr, flush=True)
        p8, _ = await produce_load(port, 8, 4.0)
        print(f"produce 8: {p8:.0f}", file=sys.stderr, flush=True)
        backlog = [0] * 8
        redis = aioredis.from_url(f"redis://127.0.0.1:{redis_port}")
        watcher_free = Engine(redis, lambda: snapshot(port))
        for i in range(8):
            backlog[i] = (await watcher_free.queue_stats(f"bench{i}")).ready
        print(f"backlog: {backlog}", file=sys.stderr, flush=True)
        c8 = await consume_load(port, 8, backlog)
        print(f"consume 8: {c8:.0f}", file=sys.stderr, flush=True)
        rpc = await rpc_load(port, 4.0)
        await watcher_free.close()
        await redis.aclose()
        rows = [
            ("raw redis-benchmark -P 100 XADD", raw, "ops/s"),
            ("zbus produce, 1 connection", p1, "msg/s"),
            ("zbus produce, 8 connections", p8, "msg/s"),
            ("zbus consume, 1 connection", c1, "msg/s"),
            ("zbus consume, 8 connections", c8, "msg/s"),
            ("zbus RPC round trips, 8 conns", rpc, "rt/s "),
        ]
        for label, value, unit in rows:
            print(f"{label:32}: {value:12,.0f} {unit}  {value / raw:.3f}x raw")


if __name__ == "__main__":
    install_uvloop()
    if len(sys.argv) == 4 and sys.argv[1] == "--serve":
        port = int(sys.argv[3])
        asyncio.run(serve_broker(int(sys.argv[2]), port, snapshot(port), start_zbus_server))
    else:
        asyncio.run(main())
