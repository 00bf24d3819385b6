"""Idle consumers at fleet size (issue 17: "build for fleets, not the demo").

``--queues`` topics, each with one waiting consumer that has nothing to take: a VibeMQ
subscriber (``--protocol vibemq``; ``--conns`` connections share the subscriptions) or a
parked zbus long poll (``--protocol zbus``, window 1, token-less on open MQs). With every
consumer waiting, the broker's own CPU share (its process tree, from /proc) and the Redis
commands it sends per second are measured over ``--seconds`` of idleness; then one message
is produced to every queue and the time until all were delivered is printed (what waking a
fleet costs). Between the two, one policy is granted on one queue (a catalog delta) and
what the broker spends in the next 3 s is printed: a change to one queue should cost about
one queue's worth, not a lease per waiting consumer. A fleet of idle consumers should cost next to nothing: a broker that polls
each queue on a timer pays per queue per tick.

Last, churn (``--churn`` rounds): the fleet's connections close, and each round
``--churn-conns`` new connections consume (zbus: park a long poll on) or subscribe to every
queue between them and leave; the broker's resident memory is printed after each round. A
broker that forgets the consumers that left stays flat from the second round on; one that
keeps something per closed connection or per MQ runtime grows by it every round.

The raw ``redis-benchmark -P 100 XADD`` rate of the same Redis is printed first as the
machine's baseline (there is no peer for idle cost: the zbus 5.1 server keeps its queues
in memory and has no storage to poll).

Run: ``.venv/bin/python bench/idle_fleet.py [--protocol vibemq|zbus] [--queues 5000]``
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
import time
from collections.abc import AsyncIterator, Coroutine
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis.asyncio as aioredis

from bench import zbus_load
from bench.harness import (
    broker,
    raw_xadd,
    redis_calls,
    redis_server,
    rss_bytes,
    sent_between,
    serve_main,
    tree_cpu_seconds,
)
from brokers.clients.vibemq import VibeMQClient
from brokers.engine import (
    AppInfo,
    BrokerInfo,
    CatalogDelta,
    CatalogSnapshot,
    ConsumerPolicyInfo,
    PartitionGroupInfo,
    ProducerPolicyInfo,
    TopicInfo,
    hash_token,
    publish_delta,
)
from brokers.servers.jmq4 import install_uvloop
from brokers.servers.vibemq import start_vibemq_server
from brokers.servers.vibemq.config import ServerConfig
from brokers.servers.zbus import start_zbus_server

TOKEN = "fleet-token"
APP = "fleet"
ANONYMOUS = "zbus.anonymous"


def _queues() -> list[str]:
    return [f"q{i}" for i in range(int(os.environ["FLEET_QUEUES"]))]


def snapshot(port: int) -> CatalogSnapshot:
    """The fleet: every queue a one-partition topic led by broker 1; app ``fleet`` (its
    token, for VibeMQ) and the team's anonymous app (token-less zbus) with a producer and a
    consumer policy on each."""
    codes = _queues()
    group = (PartitionGroupInfo(group_id=0, leader=1, partitions=(0,)),)
    topics = {
        c: TopicInfo(
            code=c, partitions=1, groups=group, zbus_mode=1, team="fleet", anonymous_app=ANONYMOUS
        )
        for c in codes
    }
    apps = {
        APP: AppInfo(code=APP, team="fleet", token_hashes=(hash_token(TOKEN),)),
        ANONYMOUS: AppInfo(code=ANONYMOUS, team="fleet"),
    }
    return CatalogSnapshot(
        version=1,
        brokers={
            1: BrokerInfo(id=1, host="127.0.0.1", jmq4_port=0, zbus_port=port, vibemq_port=port)
        },
        topics=topics,
        apps=apps,
        producers=tuple(
            ProducerPolicyInfo(name=f"{a}.{c}", topic=c, app=a) for c in codes for a in apps
        ),
        consumers=tuple(
            ConsumerPolicyInfo(name=f"{a}.{c}", topic=c, app=a) for c in codes for a in apps
        ),
    )


class Idle:
    """The broker's CPU and the Redis commands over an idle interval."""

    def __init__(self, pid: int, redis_port: int, churn: int = 0, churn_conns: int = 0) -> None:
        self.pid, self.port = pid, redis_port
        self.churn, self.churn_conns = churn, churn_conns

    async def churn_rounds(self) -> AsyncIterator[int]:
        """The churn rounds: yields before each, prints the broker's memory after each
        (once what the round's connections left is given up: 3 s)."""
        before = rss_bytes(self.pid)
        print(
            f"churn: {self.churn} rounds of {self.churn_conns:,} connections that consume"
            f" every queue and leave; broker memory before: {before / 2**20:,.1f} MB",
            flush=True,
        )
        for n in range(1, self.churn + 1):
            yield n
            await asyncio.sleep(3.0)  # closes handled, idle runtimes gone
            now = rss_bytes(self.pid)
            print(
                f"  after round {n}: {now / 2**20:,.1f} MB ({(now - before) / 2**20:+,.1f} MB)",
                flush=True,
            )

    def measure(self, seconds: float) -> tuple[float, float]:
        """(broker CPU share of one core, Redis commands/s) over ``seconds``; prints the
        commands sent most."""
        cpu, cmds, wall = tree_cpu_seconds(self.pid), redis_calls(self.port), time.monotonic()
        time.sleep(seconds)
        wall = time.monotonic() - wall
        share = (tree_cpu_seconds(self.pid) - cpu) / wall
        sent = sent_between(cmds, redis_calls(self.port))
        top = sorted(sent.items(), key=lambda kv: -kv[1])[:6]
        print("  most sent: " + ", ".join(f"{k} {n / wall:,.0f}/s" for k, n in top), flush=True)
        return share, sum(sent.values()) / wall


async def vibemq_fleet(
    port: int, queues: list[str], conns: int, idle: Idle, seconds: float
) -> None:
    clients = [await VibeMQClient.open("127.0.0.1", port, TOKEN) for _ in range(conns)]
    started = time.perf_counter()
    for n in range(0, len(queues), conns):
        await asyncio.gather(
            *(c.subscribe(q) for c, q in zip(clients, queues[n : n + conns], strict=False))
        )
    print(f"subscribed {len(queues):,} queues in {time.perf_counter() - started:.1f} s", flush=True)
    await asyncio.sleep(3)  # settle: the first empty leases, caught-up marks
    share, rate = await asyncio.to_thread(idle.measure, seconds)
    _idle_line(len(queues), share, rate)
    await policy_change(idle)
    publisher = await VibeMQClient.open("127.0.0.1", port, TOKEN)
    started = time.perf_counter()
    await asyncio.gather(*(publisher.publish(q, {"n": 1}) for q in queues))
    print(f"  published in {time.perf_counter() - started:.2f} s", flush=True)
    done = Delivered(len(queues))

    async def drain(c: VibeMQClient) -> None:
        while not done.all.is_set():
            try:
                d = await c.receive(1.0)
            except TimeoutError:
                continue
            c.ack(d.id)
            done.add(1)

    await done.wait(*(drain(c) for c in clients))
    done.report(started)
    for c in [*clients, publisher]:
        await c.close()
    async for _ in idle.churn_rounds():

        async def visit(share: list[str]) -> None:
            client = await VibeMQClient.open("127.0.0.1", port, TOKEN)
            for q in share:
                await client.subscribe(q)
            await client.close()

        n = idle.churn_conns
        await asyncio.gather(*(visit(queues[i::n]) for i in range(n)))


async def zbus_fleet(port: int, queues: list[str], conns: int, idle: Idle, seconds: float) -> None:
    links = [await zbus_load.Conn.open(port) for _ in range(conns)]
    for n, q in enumerate(queues):
        links[n % conns].write(
            zbus_load.frame({"cmd": "consume", "mq": q, "msgid": f"c{n}", "window": "1"})
        )
    await asyncio.sleep(3)  # every consume parked
    share, rate = await asyncio.to_thread(idle.measure, seconds)
    _idle_line(len(queues), share, rate)
    await policy_change(idle)
    producer = await zbus_load.Conn.open(port)
    started = time.perf_counter()
    for n, q in enumerate(queues):
        producer.write(zbus_load.frame({"cmd": "produce", "mq": q, "msgid": f"p{n}"}, b"x"))
    done = Delivered(len(queues))

    async def drain(link: zbus_load.Conn) -> None:
        while not done.all.is_set():
            try:
                msgs = await link.read(1.0)
            except TimeoutError:
                continue
            done.add(sum(1 for m in msgs if m.status == 200))

    await done.wait(*(drain(link) for link in links))
    done.report(started)
    for link in [*links, producer]:
        link.close()
    async for _ in idle.churn_rounds():
        visitors = [await zbus_load.Conn.open(port) for _ in range(idle.churn_conns)]
        for n, q in enumerate(queues):
            visitors[n % len(visitors)].write(
                zbus_load.frame({"cmd": "consume", "mq": q, "msgid": f"v{n}", "window": "1"})
            )
        await asyncio.sleep(1.0)  # every consume parked
        for link in visitors:
            link.close()


async def policy_change(idle: Idle, seconds: float = 3.0) -> None:
    """One policy granted on one queue (a catalog delta): what the broker spends on it."""
    client = aioredis.Redis(port=idle.port)
    delta = CatalogDelta(
        producers={"other.q0": ProducerPolicyInfo(name="other.q0", topic="q0", app=APP)}
    )
    version = await publish_delta(client, delta)
    await client.aclose()
    share, rate = await asyncio.to_thread(idle.measure, seconds)
    print(
        f"one policy changed (catalog version {version}): broker cpu {share * seconds:.2f} s,"
        f" {rate * seconds:,.0f} Redis commands over the next {seconds:.0f} s",
        flush=True,
    )


class Delivered:
    """Deliveries counted across connections until every queue had its message."""

    def __init__(self, expected: int) -> None:
        self.expected, self.count, self.all = expected, 0, asyncio.Event()
        self.last = time.perf_counter()

    def add(self, n: int) -> None:
        if n:
            self.count += n
            self.last = time.perf_counter()
            if self.count >= self.expected:
                self.all.set()

    async def wait(self, *drains: Coroutine[None, None, None], limit: float = 60.0) -> None:
        """Run the drains until every message came, or ``limit`` seconds."""
        tasks = [asyncio.ensure_future(d) for d in drains]
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.all.wait(), limit)
        self.all.set()
        await asyncio.gather(*tasks)

    def report(self, started: float) -> None:
        print(
            f"one message to each queue: {self.count:,}/{self.expected:,} delivered, "
            f"the last {self.last - started:.2f} s after the first produce",
            flush=True,
        )


def _idle_line(queues: int, share: float, rate: float) -> None:
    print(
        f"idle, {queues:,} waiting consumers: broker cpu {share:.1%} of a core, "
        f"{rate:,.0f} Redis commands/s ({rate / queues:.3f} per consumer per s)",
        flush=True,
    )


def main(args: argparse.Namespace) -> None:
    os.environ["FLEET_QUEUES"] = str(args.queues)
    script = str(Path(__file__).resolve())
    with redis_server() as redis_port:
        raw = raw_xadd(redis_port, 200_000)
        print(f"raw redis-benchmark -P 100 XADD: {raw:,.0f} ops/s", flush=True)
        os.environ["FLEET_PROTOCOL"] = args.protocol
        with broker(script, redis_port) as (port, pid):
            idle = Idle(pid, redis_port, args.churn, args.churn_conns)
            fleet = vibemq_fleet if args.protocol == "vibemq" else zbus_fleet
            asyncio.run(fleet(port, _queues(), args.conns, idle, args.seconds))


def _start(*a: Any, **kw: Any) -> Any:
    """The server of ``--protocol`` (the child reads it from the environment). VibeMQ
    without its limit of new connections per IP (600 a minute): every client of the bench
    is 127.0.0.1, and the churn rounds open more than that."""
    if os.environ["FLEET_PROTOCOL"] == "vibemq":
        return start_vibemq_server(*a, config=ServerConfig(connections_per_ip=None), **kw)
    return start_zbus_server(*a, **kw)


if __name__ == "__main__":
    install_uvloop()
    if not serve_main(sys.argv, snapshot, _start):
        parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
        parser.add_argument("--protocol", choices=("vibemq", "zbus"), default="vibemq")
        parser.add_argument("--queues", type=int, default=5000)
        parser.add_argument("--conns", type=int, default=50)
        parser.add_argument("--seconds", type=float, default=10.0)
        parser.add_argument("--churn", type=int, default=4)
        parser.add_argument("--churn-conns", type=int, default=500)
        main(parser.parse_args())
