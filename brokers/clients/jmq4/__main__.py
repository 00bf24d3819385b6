"""Command line: ``python -m brokers.clients.jmq4 cluster|produce|consume …``.

Examples::

    python -m brokers.clients.jmq4 --app demo-app --token T cluster orders
    python -m brokers.clients.jmq4 --app demo-app --token T produce orders hello world
    python -m brokers.clients.jmq4 --app demo-app --token T consume orders --max 10
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys

from brokers.clients.jmq4.client import Jmq4Client
from brokers.clients.jmq4.connection import Jmq4Error


def parse_args(argv: list[str]) -> argparse.Namespace:
    """The CLI's arguments."""
    parser = argparse.ArgumentParser(prog="python -m brokers.clients.jmq4")
    parser.add_argument("--host", default=os.environ.get("JMQ4_HOST", "127.0.0.1"))
    parser.add_argument("--port", type=int, default=int(os.environ.get("JMQ4_PORT", "50088")))
    parser.add_argument("--app", default=os.environ.get("JMQ4_APP", ""), required=False)
    parser.add_argument("--token", default=os.environ.get("JMQ4_TOKEN", ""))
    sub = parser.add_subparsers(dest="command", required=True)
    cluster = sub.add_parser("cluster", help="show a topic's metadata")
    cluster.add_argument("topic")
    produce = sub.add_parser("produce", help="produce messages (arguments, or stdin lines)")
    produce.add_argument("topic")
    produce.add_argument("bodies", nargs="*")
    produce.add_argument("--partition", type=int, default=None)
    produce.add_argument("--batch", action="store_true", help="send one batch message")
    consume = sub.add_parser("consume", help="print and ack messages")
    consume.add_argument("topic")
    consume.add_argument("--max", type=int, default=0, help="stop after this many (0: never)")
    consume.add_argument("--wait", type=float, default=0, help="stop after idle seconds")
    return parser.parse_args(argv)


async def run(args: argparse.Namespace) -> int:
    """Execute the command; the exit status."""
    async with Jmq4Client(args.host, args.port, app=args.app, token=args.token) as client:
        if args.command == "cluster":
            meta = await client.metadata(args.topic)
            print(f"topic {meta.topic.topic} type={meta.topic.topic_type.name}")
            for g in meta.topic.partition_groups:
                b = meta.brokers.get(g.leader)
                where = f"{b.host}:{b.port} perm={b.permission}" if b else "?"
                print(
                    f"  group {g.group_id} leader {g.leader} ({where}) partitions {list(g.partitions)}"
                )
            return 0
        if args.command == "produce":
            bodies = args.bodies or [line.rstrip("\n") for line in sys.stdin]
            items = await client.produce(
                args.topic, [b.encode() for b in bodies], partition=args.partition, batch=args.batch
            )
            for item in items:
                print(f"stored partition={item.partition} index={item.index}")
            return 0
        seen = 0
        idle_since = asyncio.get_running_loop().time()
        while not args.max or seen < args.max:
            batch = await client.fetch(args.topic, long_poll_ms=1000)
            now = asyncio.get_running_loop().time()
            if not batch:
                if args.wait and now - idle_since >= args.wait:
                    break
                continue
            idle_since = now
            for m in batch:
                print(f"{m.partition}:{m.index} {m.body.decode('utf-8', 'replace')}")
            await client.ack(batch)
            seen += len(batch)
        return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        return asyncio.run(run(args))
    except Jmq4Error as exc:
        print(f"error {exc.code}: {exc.message}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
