"""Crash test: kill -9 of broker processes and of Redis under a small produce/consume load
through real sockets. Every acknowledged message is in the store exactly once, and every
one is delivered (issue 20: "keep a crash test like that in the suite")."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter

import pytest
import redis.asyncio as aioredis

from brokers.catalog_loader import publish
from brokers.clients.jmq4 import Jmq4Client
from brokers.clients.jmq4.connection import Jmq4Error
from brokers.engine import Engine, decode_record, load_snapshot
from brokers.models import ConsumerPolicy
from tests.jmq4.conftest import build_catalog
from tests.recovery.processes import BrokerProcesses

TOPIC = "orders"  # partitions 0-1 led by broker 1, 2-3 by broker 2
ERRORS = (Jmq4Error, OSError, TimeoutError)


class Load:
    """One producer (a body per call, never resent) and two consumers on ``orders``."""

    def __init__(self, port: int, token: str) -> None:
        self.port, self.token = port, token
        self.acknowledged: set[bytes] = set()
        self.failed = 0
        self.delivered: set[bytes] = set()
        self.producing = True
        self.tasks = [asyncio.create_task(self._produce())]
        self.tasks += [asyncio.create_task(self._consume()) for _ in range(2)]

    def client(self) -> Jmq4Client:
        return Jmq4Client("127.0.0.1", self.port, app="app1", token=self.token, timeout=3)

    async def _produce(self) -> None:
        seq = 0
        async with contextlib.AsyncExitStack() as stack:
            client = self.client()
            stack.push_async_callback(client.close)
            while self.producing:
                seq += 1
                body = f"m{seq}".encode()
                try:
                    await client.produce(TOPIC, [body])
                    self.acknowledged.add(body)
                except ERRORS:
                    self.failed += 1
                    await asyncio.sleep(0.02)
                await asyncio.sleep(0.004)

    async def _consume(self) -> None:
        client = self.client()
        try:
            while True:
                try:
                    batch = await client.fetch(TOPIC, long_poll_ms=300)
                    self.delivered.update(m.body for m in batch)
                    if batch:
                        await client.ack(batch)
                except ERRORS:
                    await asyncio.sleep(0.05)
        finally:
            await client.close()

    async def drain(self, within: float) -> set[bytes]:
        """Stop producing; wait until every acknowledged message was delivered. What is
        still missing after ``within`` seconds."""
        self.producing = False
        deadline = time.monotonic() + within
        while True:
            missing = self.acknowledged - self.delivered
            if not missing or time.monotonic() >= deadline:
                return missing
            await asyncio.sleep(0.1)

    async def stop(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)


async def _stored_bodies(redis_url: str) -> Counter[bytes]:
    client = aioredis.from_url(redis_url)
    try:
        snapshot = await load_snapshot(client)
        engine = Engine(client, lambda: snapshot)
        bodies: Counter[bytes] = Counter()
        for partition in range(snapshot.topics[TOPIC].partitions):
            low, high = await engine.bounds(TOPIC, partition)
            index = low
            while index < high:
                batch = await engine.read(TOPIC, partition, index, count=500)
                bodies.update(decode_record(d.record).body for d in batch)
                index = batch[-1].index + batch[-1].count
        await engine.close()
        return bodies
    finally:
        await client.aclose()


async def _run(catalog, redis, brokers: BrokerProcesses) -> tuple[Load, set[bytes]]:
    load = Load(catalog.ports[1], catalog.token)
    ports = catalog.ports

    async def restart_broker(bid: int) -> None:
        brokers.kill(bid)
        await asyncio.sleep(0.3)
        await asyncio.to_thread(brokers.start, bid, ports[bid])

    async def restart_redis(down: float) -> None:
        redis.kill()
        await asyncio.sleep(down)
        await asyncio.to_thread(redis.start)

    try:
        await asyncio.sleep(1.0)
        await restart_broker(1)
        await asyncio.sleep(1.0)
        await restart_redis(0.5)
        await asyncio.sleep(1.5)
        await restart_broker(2)
        await asyncio.sleep(1.0)
        await restart_redis(0.2)
        await asyncio.sleep(1.0)
        missing = await load.drain(within=20)
    finally:
        await load.stop()
    return load, missing


@pytest.mark.django_db(transaction=True)
def test_kill_9_of_brokers_and_redis_loses_no_acknowledged_message(own_redis, tmp_path, settings):
    settings.REDIS_URL = own_redis.url
    catalog = build_catalog(own_redis.url)
    # a killed broker's consumer leases come back after 2 s (a dropped connection does
    # not free them yet), so the drain below stays short
    ConsumerPolicy.objects.filter(topic__code=TOPIC, app__code="app1").update(ack_timeout_ms=2000)
    publish()
    brokers = BrokerProcesses(own_redis.url, tmp_path)
    try:
        for bid, port in catalog.ports.items():
            brokers.start(bid, port)
        load, missing = asyncio.run(_run(catalog, own_redis, brokers))
    finally:
        brokers.stop_all()
    stored = asyncio.run(_stored_bodies(own_redis.url))
    print(
        f"acknowledged {len(load.acknowledged)}, failed {load.failed}, "
        f"delivered {len(load.delivered)}, stored {sum(stored.values())}"
    )
    assert len(load.acknowledged) > 300, "the load was too small to mean anything"
    assert not (lost := load.acknowledged - set(stored)), f"acknowledged, not stored: {lost}"
    assert not (twice := {b for b, n in stored.items() if n > 1}), f"stored twice: {twice}"
    assert not missing, f"acknowledged, never delivered: {sorted(missing)[:20]}"
