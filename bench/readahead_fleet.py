"""Read-ahead at fleet size (issue 17: "build for fleets, not the demo").

``--mqs`` queue MQs, each with ``--backlog`` messages of ``--body`` bytes, each long-polled
``--polls`` times in a row (window 1) by a token-less zbus consumer: a busy consumer on
every MQ, whose pump reads a batch ahead from its second poll on (at its pace) and keeps
it for its next polls. For each read-ahead budget
(none, the default ``BROKER_READ_AHEAD_MB``, 0) a fresh broker process fills its own
Redis data, serves the consumes and prints: bytes kept in read-ahead at the last
delivery and at their peak (a run longer than ``read_ahead_hold`` sees the first MQs'
read-ahead go back before the last are served), the process's RSS growth over the
consumes, messages leased (in flight in Redis), deliveries sent back because the budget
was spent, and how fast the first deliveries came. The raw XADD baseline of the same Redis is printed first (there is no
peer for this figure: the zbus 5.1 server keeps every message in memory anyway).

Run: ``.venv/bin/python bench/readahead_fleet.py [--mqs 2000] [--backlog 150] [--body 512]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.harness import free_port, raw_xadd, redis_server
from bench.zbus_load import Conn
from brokers.engine import (
    AppInfo,
    BrokerInfo,
    CatalogSnapshot,
    CatalogWatcher,
    ConsumerPolicyInfo,
    Engine,
    Message,
    PartitionGroupInfo,
    ProducerPolicyInfo,
    TopicInfo,
    publish_snapshot,
)
from brokers.engine.redisio import broker_client
from brokers.servers.readahead import ReadAheadBudget
from brokers.servers.zbus import start_zbus_server

ANONYMOUS = "fleet-anon"
CONNECTIONS = 100
MB = 1024 * 1024


def snapshot(mqs: list[str], port: int) -> CatalogSnapshot:
    group = (PartitionGroupInfo(group_id=0, leader=1, partitions=(0,)),)
    topics = {
        code: TopicInfo(
            code=code, partitions=1, groups=group, zbus_mode=1, team="t", anonymous_app=ANONYMOUS
        )
        for code in mqs
    }
    return CatalogSnapshot(
        version=1,
        brokers={1: BrokerInfo(id=1, host="127.0.0.1", jmq4_port=0, zbus_port=port, vibemq_port=0)},
        topics=topics,
        apps={ANONYMOUS: AppInfo(code=ANONYMOUS, team="t")},
        producers=tuple(ProducerPolicyInfo(name=f"a.{c}", topic=c, app=ANONYMOUS) for c in mqs),
        consumers=tuple(ConsumerPolicyInfo(name=f"a.{c}", topic=c, app=ANONYMOUS) for c in mqs),
    )


def rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


async def serve_once(redis_port: int, args: argparse.Namespace, budget_mb: float | None) -> dict:
    """One broker process's run (the ``--child`` side)."""
    client = broker_client(f"redis://127.0.0.1:{redis_port}", max_connections=64)
    await client.flushall()
    mqs = [f"fleet{i}" for i in range(args.mqs)]
    port = free_port()
    await publish_snapshot(client, snapshot(mqs, port))
    watcher = CatalogWatcher(client)
    await watcher.start()
    engine = Engine(client, lambda: watcher.current, broker_id=1)
    body = os.urandom(args.body)  # incompressible: records keep their size
    for i in range(0, len(mqs), 50):  # fill: 50 MQs at a time
        await asyncio.gather(
            *(
                engine.append_many(mq, ANONYMOUS, [Message(body)] * args.backlog)
                for mq in mqs[i : i + 50]
            )
        )
    limit = 1 << 62 if budget_mb is None else int(budget_mb * MB)
    budget = ReadAheadBudget(limit)
    server = await start_zbus_server(engine, watcher, "127.0.0.1", port, 1, read_ahead=budget)
    conns = [await Conn.open(port) for _ in range(CONNECTIONS)]
    rss_before = rss_bytes()
    started = time.perf_counter()

    async def consume(n: int) -> int:
        """This connection's MQs, one after the other, each polled ``--polls`` times in a
        row (a busy consumer: the second poll reads ahead at its pace)."""
        conn, got = conns[n], 0
        for k, mq in enumerate(mqs[n::CONNECTIONS]):
            for p in range(args.polls):
                conn.write(
                    f"GET / HTTP/1.1\r\ncmd: consume\r\nmq: {mq}\r\nid: c{k}.{p}\r\n\r\n".encode()
                )
                got += len([m for m in await conn.read(60) if m.status == 200])
        return got

    delivered = sum(await asyncio.gather(*(consume(n) for n in range(CONNECTIONS))))
    took = time.perf_counter() - started
    held, rss_after = budget.held, rss_bytes()
    in_flight = 0
    for i in range(0, len(mqs), 200):
        stats = await asyncio.gather(
            *(engine.group_stats(mq, ANONYMOUS) for mq in mqs[i : i + 200])
        )
        in_flight += sum(s.in_flight for s in stats)
    for conn in conns:
        conn.close()
    await server.stop(grace=1.0)
    await engine.close()
    await watcher.stop()
    await client.aclose()
    return {
        "delivered": delivered,
        "seconds": took,
        "held": held,
        "peak": budget.peak,
        "refused": budget.refused,
        "rss_growth": rss_after - rss_before,
        "in_flight": in_flight,
    }


def child(redis_port: int, args: argparse.Namespace, budget: str) -> dict:
    cmd = [
        sys.executable, __file__, "--child", str(redis_port), budget,
        "--mqs", str(args.mqs), "--backlog", str(args.backlog), "--body", str(args.body),
        "--polls", str(args.polls),
    ]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mqs", type=int, default=2000)
    parser.add_argument("--backlog", type=int, default=150)
    parser.add_argument("--body", type=int, default=512)
    parser.add_argument("--polls", type=int, default=3, help="polls in a row per MQ")
    parser.add_argument("--child", nargs=2, metavar=("REDIS_PORT", "BUDGET_MB"))
    args = parser.parse_args()
    if args.child:
        redis_port, budget = args.child
        result = asyncio.run(
            serve_once(int(redis_port), args, None if budget == "none" else float(budget))
        )
        print(json.dumps(result), flush=True)
        return
    default_mb = ReadAheadBudget.from_environment().limit / MB
    print(
        f"{args.mqs} MQs x {args.backlog} messages of {args.body} B, {args.polls} long polls"
        f" in a row on each, over {CONNECTIONS} connections",
        flush=True,
    )
    with redis_server() as redis_port:
        raw = raw_xadd(redis_port, 200_000)
        print(f"raw XADD baseline: {raw:,.0f} ops/s", flush=True)
        print(  # kept: at the last delivery (the first MQs' read-ahead may be back by then)
            f"{'budget':>14} {'kept MB':>8} {'peak MB':>8} {'RSS +MB':>8} {'in flight':>10}"
            f" {'sent back':>10} {'deliveries/s':>13}"
        )
        for label, budget in (
            ("none", "none"),
            (f"{default_mb:g} MB", f"{default_mb:g}"),
            ("0 (off)", "0"),
        ):
            r = child(redis_port, args, budget)
            print(
                f"{label:>14} {r['held'] / MB:8.1f} {r['peak'] / MB:8.1f}"
                f" {r['rss_growth'] / MB:8.1f} {r['in_flight']:>10,} {r['refused']:>10,}"
                f" {r['delivered'] / r['seconds']:13,.0f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
