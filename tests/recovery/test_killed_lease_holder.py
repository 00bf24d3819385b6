"""A zbus broker process killed (kill -9) with a message in flight to its consumer and more
read ahead for it: a consumer on the other broker gets every one of them within seconds —
the dead process's group leases are handed on once it lapses (brokers.engine.holders) —
not after the MQ sessions' 10-minute lease."""

from __future__ import annotations

import asyncio
import time

import pytest

from brokers.clients.zbus import ZbusClient
from brokers.models import Broker
from tests.jmq4.conftest import build_catalog
from tests.recovery.processes import BrokerProcesses

MQ = "orders"
N = 20


async def _scenario(ports: dict[int, int], token: str) -> tuple[set[bytes], set[bytes]]:
    """(what the other broker must deliver, everything produced)."""
    bodies = {b"k%d" % i for i in range(N)}
    async with ZbusClient("127.0.0.1", ports[2], timeout=5) as producer:
        for body in sorted(bodies):
            await producer.produce(MQ, body, token=token)
    doomed = ZbusClient("127.0.0.1", ports[1], timeout=5)
    await doomed.connect()
    first = await doomed.consume(MQ, window=1, token=token, wait_s=5)
    assert first is not None and first.body in bodies  # acked by the next consume
    # right after the first: the pump reads ahead at the consumer's pace
    second = await doomed.consume(MQ, window=1, token=token, wait_s=5)
    assert second is not None and second.body in bodies  # in flight, never acked
    return bodies - {first.body}, bodies


async def _drain(port: int, token: str, want: set[bytes], seconds: float) -> tuple[set, float]:
    got: set[bytes] = set()
    started = time.monotonic()
    async with ZbusClient("127.0.0.1", port, timeout=5) as consumer:
        while not want <= got and time.monotonic() - started < seconds:
            msg = await consumer.consume(MQ, window=1, token=token, wait_s=1)
            if msg is not None and msg.body:
                got.add(msg.body)
    return got, time.monotonic() - started


@pytest.mark.django_db(transaction=True)
def test_a_killed_brokers_leases_reach_a_consumer_on_another_broker(redis_url, tmp_path):
    catalog = build_catalog(redis_url)
    ports = dict(Broker.objects.values_list("id", "zbus_port"))
    brokers = BrokerProcesses(redis_url, tmp_path)  # heartbeat 0.5 s: holders lapse in 2.5 s
    try:
        brokers.start(1, ports[1])
        brokers.start(2, ports[2])
        want, bodies = asyncio.run(_scenario(ports, catalog.token))
        brokers.kill_tree(1)  # within the read-ahead hold: the rest is leased to broker 1
        got, took = asyncio.run(_drain(ports[2], catalog.token, want, 30))
        # the first may come again too: its ack may not have reached Redis before the kill
        assert want <= got <= bodies, (
            f"missing {sorted(want - got)}; broker 2: {brokers.log(2)[-3000:]}"
        )
        assert took < 15  # two lapses and a sweep round, not the 10-minute lease
        deadline = time.monotonic() + 5  # logged once the sweep has handed everything on
        while "is gone" not in brokers.log(2) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert "is gone" in brokers.log(2)
    finally:
        brokers.stop_all()
