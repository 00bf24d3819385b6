"""VibeMQ broker benchmark (a script, not a test):
``python bench/vibemq.py [--processes 1,2] [--profile DIR]``.

For each process count in turn (``runbroker`` runs as many as the machine has cores by
default: two here), starts its own redis-server (AOF everysec) and a VibeMQ server in
a separate process (``--serve``; ``--processes N`` runs it as ``runbroker --processes N``
does, the processes sharing the port with SO_REUSEPORT) with the
queues in a catalog snapshot — app ``bench`` (its token) has a producer and a consumer
policy on each — then prints, next to the goals of issue 17:

* publish with acks msg/s — 100-byte JSON payloads, 4 connections, 64 publishes in flight
  on each (every publishAck means the message is stored); goal ≥ 50,000;
* delivery to one acking subscriber msg/s — over the published backlog, every delivery
  acked (the acks of what one read brought are written together); goal ≥ 50,000;

  both by ``bench/vibemq_load.py``, a load generator written from the spec (as a client in
  another language would load the broker), and again, for comparison, by the project's
  Python client (its own CPU then takes much of what this small machine has);
* publish→deliver latency p50/p99 at a paced 5,000 msg/s (10 publishes in one write every
  2 ms, 5 s after a 1 s warm-up at that rate); goal p99 < 5 ms — by the load generator
  (the send time rides in the message id), and again by our Python client (publisher,
  subscriber and pacing in this one process, whose own delays count as latency);
* the raw baseline: ``redis-benchmark -P 100 -q XADD`` on the same Redis, in the same run.

Each throughput line also shows the load generator's own CPU share over the phase
(process time / wall time): near 100% means the generator, not the broker, set the pace;
and the broker's CPU per message (its process tree, from /proc): a figure that holds when
the machine's speed drifts, for comparing changes.
With ``--profile DIR`` (py-spy on PATH or in ``$PY_SPY``) each phase of the broker is
recorded and its top frames printed (the profiler costs CPU: take the figures from a run
without it).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


from bench import vibemq_load
from bench.harness import (
    broker_bench,
    profiled,
    py_spy,
    serve_main,
    top_frames,
    tree_cpu_seconds,
)
from brokers.clients.vibemq import VibeMQClient
from brokers.engine import (
    AppInfo,
    CatalogSnapshot,
    ConsumerPolicyInfo,
    ProducerPolicyInfo,
    TopicInfo,
    hash_token,
)
from brokers.protocols.vibemq import Ack, encode_frame
from brokers.servers.jmq4 import install_uvloop
from brokers.servers.vibemq import start_vibemq_server

TOKEN = "bench-token"
PAYLOAD = {"data": "x" * 88}  # about 100 bytes of JSON
QUEUES = ("bench", "latency")


def snapshot(_port: int = 0) -> CatalogSnapshot:
    """The bench queues (unbounded RoundRobin topics) and app ``bench`` with a producer
    and a consumer policy on each: without them the engine's gate refuses (FORBIDDEN)."""
    return CatalogSnapshot(
        version=1,
        topics={q: TopicInfo(code=q, partitions=1) for q in QUEUES},
        apps={"bench": AppInfo(code="bench", token_hashes=(hash_token(TOKEN),))},
        producers=tuple(
            ProducerPolicyInfo(name=f"bench.{q}", topic=q, app="bench") for q in QUEUES
        ),
        consumers=tuple(
            ConsumerPolicyInfo(name=f"bench.{q}", topic=q, app="bench") for q in QUEUES
        ),
    )


class Clock:
    """Wall time and the generator's CPU time since it was made."""

    def __init__(self) -> None:
        self.wall, self.cpu = time.perf_counter(), time.process_time()

    def elapsed(self) -> tuple[float, float]:
        """(wall seconds, generator CPU share)."""
        wall = time.perf_counter() - self.wall
        return wall, (time.process_time() - self.cpu) / wall


def ack_all(client: VibeMQClient, ids: list[str]) -> None:
    """Ack deliveries in one write (the documented form: ``headers.messageId``)."""
    client.send_raw(
        b"".join(encode_frame(Ack(id=client.next_id(), headers={"messageId": i})) for i in ids)
    )


async def publish_load(
    port: int, seconds: float, conns: int = 4, window: int = 64
) -> tuple[float, float]:
    """msg/s with ``window`` publishes in flight on each of ``conns`` connections, and the
    generator's CPU share."""
    clients = [await VibeMQClient.open("127.0.0.1", port, TOKEN) for _ in range(conns)]
    stop = time.perf_counter() + seconds
    done = 0

    async def lane(client: VibeMQClient) -> None:
        nonlocal done
        while time.perf_counter() < stop:
            await client.publish("bench", PAYLOAD)
            done += 1

    clock = Clock()
    await asyncio.gather(*(lane(c) for c in clients for _ in range(window)))
    wall, cpu = clock.elapsed()
    for c in clients:
        await c.close()
    return done / wall, cpu


async def deliver_load(port: int, total: int) -> tuple[float, float]:
    """msg/s delivered to one subscriber acking every delivery, over ``total`` messages."""
    client = await VibeMQClient.open("127.0.0.1", port, TOKEN)
    await client.subscribe("bench")
    got = 0
    clock = Clock()
    while got < total:
        batch = [await client.receive(30)]
        while not client.deliveries.empty():
            batch.append(client.deliveries.get_nowait())
        ack_all(client, [m.id for m in batch])
        got += len(batch)
    wall, cpu = clock.elapsed()
    await client.close()
    return got / wall, cpu


async def latency(
    port: int, rate: int, seconds: float, warmup: float = 1.0
) -> tuple[float, float, int]:
    """p50 and p99 in ms from publish to delivery at ``rate`` msg/s over ``seconds`` (after
    ``warmup`` seconds at that rate, not counted), and how many were counted."""
    pub = await VibeMQClient.open("127.0.0.1", port, TOKEN)
    sub = await VibeMQClient.open("127.0.0.1", port, TOKEN)
    await sub.subscribe("latency")
    samples: list[float] = []
    counted_from = time.time() + warmup
    total = int(rate * (seconds + warmup))

    async def consume() -> None:
        got = 0
        while got < total:
            batch = [await sub.receive(30)]
            while not sub.deliveries.empty():
                batch.append(sub.deliveries.get_nowait())
            now = time.time()
            for m in batch:
                if m.payload["t"] >= counted_from:
                    samples.append((now - m.payload["t"]) * 1000)
            ack_all(sub, [m.id for m in batch])
            got += len(batch)

    task = asyncio.create_task(consume())
    per_tick = 10
    interval = per_tick / rate
    start = time.perf_counter()
    pending: set[asyncio.Task] = set()
    for tick in range(total // per_tick):
        delay = start + tick * interval - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        for _ in range(per_tick):
            sending = asyncio.create_task(pub.publish("latency", {"t": time.time()}))
            pending.add(sending)
            sending.add_done_callback(pending.discard)
    await asyncio.gather(*pending)
    await asyncio.wait_for(task, 60)
    await pub.close()
    await sub.close()
    cuts = statistics.quantiles(samples, n=100)
    return cuts[49], cuts[98], len(samples)


async def main(args: argparse.Namespace) -> None:
    profile = Path(args.profile) if args.profile else None
    if profile and py_spy() is None:
        print("--profile: py-spy not found (pip install py-spy; or set PY_SPY)", flush=True)
        profile = None
    counts = [int(p) for p in str(args.processes).split(",") if p]
    summary = [await measure(args, count, profile) for count in counts]
    if len(summary) > 1:
        print("\nsummary (each process count with its own Redis and raw baseline):")
        print(
            f"  {'processes':>9} {'raw XADD/s':>11} {'publish/s':>10} {'deliver/s':>10} {'p99 ms':>7}"
        )
        for count, (raw, publish, deliver, p99) in zip(counts, summary, strict=True):
            print(f"  {count:>9} {raw:>11,.0f} {publish:>10,.0f} {deliver:>10,.0f} {p99:>7.2f}")
    if profile:
        for path in sorted(profile.glob("vibemq-*.txt")):
            print(f"\n== profile {path.name} ==\n{top_frames(path)}")


async def measure(
    args: argparse.Namespace, processes: int, profile: Path | None
) -> tuple[float, float, float, float]:
    """Every phase against a broker of ``processes`` processes; prints the figures and
    returns (raw XADD/s, publish/s, deliver/s, p99 ms)."""

    def recorded(phase: str) -> contextlib.AbstractContextManager[None]:
        out = profile / f"vibemq-{processes}p-{phase}.txt" if profile else None
        return profiled(pid, out)

    with broker_bench(__file__, 1_000_000, processes) as (raw, _, port, pid):
        cpu = tree_cpu_seconds(pid)
        with recorded("publish"):
            published = await vibemq_load.publish(port, TOKEN, "bench", args.seconds)
        publish, pub_cpu = published.rate, published.generator_cpu
        pub_us = (tree_cpu_seconds(pid) - cpu) / max(1, published.messages) * 1e6
        backlog = min(published.messages, 200_000)
        cpu = tree_cpu_seconds(pid)
        with recorded("deliver"):
            delivered = await vibemq_load.deliver(port, TOKEN, "bench", backlog)
        deliver, del_cpu = delivered.rate, delivered.generator_cpu
        del_us = (tree_cpu_seconds(pid) - cpu) / backlog * 1e6
        ours_pub, ours_pub_cpu = await publish_load(port, args.seconds / 2)
        ours_del, ours_del_cpu = await deliver_load(
            port, min(int(ours_pub * args.seconds / 2), 100_000)
        )
        with recorded("latency"):
            timed = await vibemq_load.latency(port, TOKEN, "latency", 5000, args.seconds)
        p50, p99, n = await latency(port, 5000, args.seconds)
        print(f"broker processes: {processes}")
        print(f"raw redis-benchmark -P 100 XADD  : {raw:12,.0f} ops/s   1.00x (median)")
        print(
            f"VibeMQ publish+ack, 4 conns      : {publish:12,.0f} msg/s   {publish / raw:.3f}x raw"
            f"   goal >= 50,000 {'met' if publish >= 50_000 else 'NOT met'}"
            f"   (generator cpu {pub_cpu:.0%}; broker cpu {pub_us:.1f} µs/msg)"
        )
        print(
            f"VibeMQ deliver+ack, 1 subscriber : {deliver:12,.0f} msg/s   {deliver / raw:.3f}x raw"
            f"   goal >= 50,000 {'met' if deliver >= 50_000 else 'NOT met'}"
            f"   ({backlog:,} messages; generator cpu {del_cpu:.0%}; broker cpu {del_us:.1f} µs/msg)"
        )
        print(
            f"  the same by our Python client   : publish {ours_pub:,.0f} msg/s (its cpu"
            f" {ours_pub_cpu:.0%}), deliver {ours_del:,.0f} msg/s (its cpu {ours_del_cpu:.0%})"
        )
        print(
            f"VibeMQ publish→deliver @5,000/s  : p50 {timed.p50:.2f} ms  p99 {timed.p99:.2f} ms"
            f"   goal p99 < 5 ms {'met' if timed.p99 < 5 else 'NOT met'}"
            f"   ({timed.samples:,} samples; generator cpu {timed.generator_cpu:.0%})"
        )
        print(
            f"  the same by our Python client   : p50 {p50:.2f} ms  p99 {p99:.2f} ms"
            f"   ({n:,} samples)"
        )
    return raw, publish, deliver, timed.p99


if __name__ == "__main__":
    install_uvloop()
    if not serve_main(sys.argv, snapshot, start_vibemq_server):
        parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
        parser.add_argument("--seconds", type=float, default=5.0)
        parser.add_argument(
            "--processes", default="1,2", help="broker process counts, each in turn: e.g. 1,2"
        )
        parser.add_argument("--profile", default="", help="record the broker with py-spy here")
        asyncio.run(main(parser.parse_args()))
