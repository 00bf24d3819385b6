"""Client listing at fleet size: what noting clients costs the hot path and the store,
and what reading them costs the console (a script, not a test):
``python bench/clients.py [--apps 5000] [--hosts 4] [--topics 2]``.

Starts its own redis-server on a free port and an engine on it, with a catalog of
``--apps`` apps each producing to ``--topics`` topics of its own. It times:

* the gate's producer check for a client address with the client listing on and off
  (what every produce and consume pays for it, per call);
* a flush after ``--hosts`` connections of every app connected and every (app, host,
  topic) produced — the first flush, and one half a minute of traffic later, which
  writes only what is due again;
* reading one app's clients (the app page) and the whole inventory (the admin page);
* appends of one message with a client address, listing on and off, the same run.

The raw Redis baseline (pipelined XADD) of the same run is printed first, as in every
benchmark here.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from statistics import median

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

CHECKS = 200_000
APPENDS = 5_000
ROUNDS = 5


def catalog(apps: int, topics: int) -> CatalogSnapshot:
    """App ``a<i>`` produces to and consumes ``t<i>.<j>``."""
    infos = {
        f"t{i}.{j}": TopicInfo(code=f"t{i}.{j}", partitions=1)
        for i in range(apps)
        for j in range(topics)
    }
    return CatalogSnapshot(
        version=1,
        brokers={},
        topics=infos,
        producers=tuple(
            ProducerPolicyInfo(name=f"p.{c}", topic=c, app=f"a{c[1:].split('.')[0]}") for c in infos
        ),
        consumers=tuple(
            ConsumerPolicyInfo(name=f"c.{c}", topic=c, app=f"a{c[1:].split('.')[0]}") for c in infos
        ),
    )


@contextlib.contextmanager
def listing_on(engine: Engine, listing: bool) -> Iterator[None]:
    """The gate notes clients (``listing``) or not, for the duration."""
    saved = engine.gate._seen
    engine.gate._seen = saved if listing else None
    try:
        yield
    finally:
        engine.gate._seen = saved


def per_call_ns(engine: Engine, listing: bool) -> float:
    """Nanoseconds per gate producer check with a client address."""
    with listing_on(engine, listing):
        started = time.perf_counter_ns()
        for i in range(CHECKS):
            engine.gate.producer("t0.0", "a0", f"10.0.{i % 4}.1:5000")
        spent = time.perf_counter_ns() - started
    engine.clients._active.clear()
    return spent / CHECKS


async def appends_per_s(engine: Engine, listing: bool) -> float:
    """Appends of one message a second, one after the other, with a client address."""
    with listing_on(engine, listing):
        started = time.perf_counter()
        for i in range(APPENDS):
            await engine.append("t0.0", "a0", [Message(b"x")], client_address=f"10.1.0.{i % 8}:1")
        return APPENDS / (time.perf_counter() - started)


async def main(port: int, args: argparse.Namespace) -> None:
    client = broker_client(f"redis://127.0.0.1:{port}", max_connections=8)
    snap = catalog(args.apps, args.topics)
    engine = Engine(client, lambda: snap)
    print(f"{args.apps:,} apps x {args.hosts} connected hosts x {args.topics} topics")
    checks: dict[bool, list[float]] = {False: [], True: []}
    appends: dict[bool, list[float]] = {False: [], True: []}
    for r in range(ROUNDS):  # interleaved, turn about, so that the noise falls on both alike
        for listing in (r % 2 == 0, r % 2 == 1):
            checks[listing].append(per_call_ns(engine, listing))
            appends[listing].append(await appends_per_s(engine, listing))
    off, on = median(checks[False]), median(checks[True])
    print(f"  gate producer check: {off:6.0f} ns without listing, {on:6.0f} ns with "
          f"({on - off:+.0f} ns a call; median of {ROUNDS})")  # fmt: skip
    a_off, a_on = median(appends[False]), median(appends[True])
    print(f"  appends one by one: {a_off:,.0f}/s without listing, {a_on:,.0f}/s with "
          f"({a_on / a_off:.2f}x)")  # fmt: skip
    await engine.clients.flush()

    for i in range(args.apps):
        for h in range(args.hosts):
            address = f"10.2.{h}.{i % 250}:{40000 + i}"
            engine.client_connected(address, f"a{i}", "jmq4", "JAVA", f"4.2.{h}")
            for j in range(args.topics):
                engine.gate.producer(f"t{i}.{j}", f"a{i}", address)
    rows = args.apps * args.hosts * (1 + args.topics)
    started = time.perf_counter()
    await engine.clients.flush()
    first = (time.perf_counter() - started) * 1000
    print(f"  first flush, {rows:,} rows:                     {first:8.1f} ms")
    for i in range(args.apps):  # the same clients go on producing: nothing due yet
        for h in range(args.hosts):
            engine.gate.producer(f"t{i}.0", f"a{i}", f"10.2.{h}.{i % 250}:{40000 + i}")
    started = time.perf_counter()
    await engine.clients.flush()
    again = (time.perf_counter() - started) * 1000
    print(f"  next flush, {args.apps * args.hosts:,} active, none due:        {again:8.1f} ms")
    started = time.perf_counter()
    (one,) = (await engine.clients_of(["a7"]))["a7"][:1]
    app_ms = (time.perf_counter() - started) * 1000
    assert one.connections == 1 and one.protocol == "jmq4", one
    started = time.perf_counter()
    inventory = await engine.client_inventory()
    inv_ms = (time.perf_counter() - started) * 1000
    kinds = sorted((i.protocol, i.version) for i in inventory)  # and the appends' unsaid one
    assert len(kinds) == args.hosts + 1, kinds
    assert sum(i.connections for i in inventory) == args.apps * args.hosts
    print(f"  one app's clients:                              {app_ms:8.1f} ms")
    print(f"  inventory of {args.apps:,} apps ({len(inventory)} kinds):          {inv_ms:8.1f} ms")
    await engine.close()
    await client.aclose()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--apps", type=int, default=5_000)
    parser.add_argument("--hosts", type=int, default=4)
    parser.add_argument("--topics", type=int, default=2)
    arguments = parser.parse_args()
    with redis_server() as redis_port:
        print(f"raw redis-benchmark -P 100 XADD: {raw_xadd(redis_port, 200_000):,.0f} ops/s")
        asyncio.run(main(redis_port, arguments))
