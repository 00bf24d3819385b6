"""A JMQ4 leader killed (kill -9) while its consumer holds a partition lock: after the
failover the new leader's consumer gets the locked batch within seconds — the dead
process's locks are dropped once it lapses (brokers.engine.holders) — not after the
policy's ack timeout (here 120 s)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest

from brokers.catalog_loader import publish
from brokers.clients.jmq4 import Jmq4Client
from brokers.models import ConsumerPolicy, PartitionGroup
from mqcloud.tasks import mark_silent_brokers_down
from tests.jmq4.conftest import build_catalog
from tests.recovery.processes import BrokerProcesses

DEAD_AFTER = 3.0  # seconds of silence before a broker is marked down (heartbeat 0.5 s)
ACK_TIMEOUT_MS = 120_000


def _eventually(check: Callable[[], bool], what: str, within: float = 15) -> None:
    started = time.monotonic()
    while not check():
        assert time.monotonic() - started < within, what
        time.sleep(0.1)


def _client(port: int, token: str) -> Jmq4Client:
    return Jmq4Client("127.0.0.1", port, app="app1", token=token, timeout=5)


async def _lock(port: int, token: str) -> tuple[list[bytes], Jmq4Client]:
    """Produce a batch to `local` and fetch it without acking: the lock is held."""
    bodies = [b"l%d" % i for i in range(8)]
    async with _client(port, token) as producer:
        await producer.produce("local", bodies, partition=0)
    holder = _client(port, token)
    got = await holder.fetch("local", count=50)
    assert sorted(m.body for m in got) == bodies
    return bodies, holder


async def _take_over(port: int, token: str, seconds: float) -> list[bytes]:
    """Fetch from the new leader until the locked batch comes (or ``seconds`` pass)."""
    started = time.monotonic()
    async with _client(port, token) as consumer:
        while time.monotonic() - started < seconds:
            try:
                got = await consumer.fetch("local", count=50, long_poll_ms=500)
            except Exception:  # the cluster view may still name the dead leader
                await asyncio.sleep(0.2)
                continue
            if got:
                await consumer.ack(got)
                return [m.body for m in got]
    return []


@pytest.mark.django_db(transaction=True)
def test_a_killed_leaders_lock_is_dropped_before_its_ack_timeout(redis_url, tmp_path, settings):
    settings.BROKER_DEAD_AFTER_SECONDS = DEAD_AFTER
    catalog = build_catalog(redis_url)  # `local` is led by broker 1
    ConsumerPolicy.objects.filter(topic__code="local", app__code="app1").update(
        ack_timeout_ms=ACK_TIMEOUT_MS
    )
    publish()
    ports, token = catalog.ports, catalog.token
    brokers = BrokerProcesses(redis_url, tmp_path, BROKER_PROCESSES="1")
    with asyncio.Runner() as runner:
        try:
            for bid in (1, 2):
                brokers.start(bid, ports[bid])
            bodies, _holder = runner.run(_lock(ports[1], token))
            brokers.kill(1)  # one process per broker: nothing stops gracefully
            killed = time.monotonic()
            _eventually(lambda: mark_silent_brokers_down() == [1], "broker 1 never marked down")
            assert PartitionGroup.objects.get(topic__code="local").leader_id == 2
            got = runner.run(_take_over(ports[2], token, 60))
            took = time.monotonic() - killed
            assert sorted(got) == bodies, brokers.log(2)[-3000:]
            assert took < 30, took  # failover and two holder lapses, not the 120 s lock
        finally:
            brokers.stop_all()
