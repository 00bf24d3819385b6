"""A JMQ4 consumer whose connection is reset mid-batch (its process died) against a real
broker process: the batch goes to another consumer within 1 s, although the policy's
ack timeout is 30 s (issue 20 item 3)."""

from __future__ import annotations

import asyncio
import socket
import struct
import time

import pytest

from brokers.clients.jmq4 import Jmq4Client
from tests.jmq4.conftest import build_catalog
from tests.recovery.processes import BrokerProcesses


def _client(port: int, token: str) -> Jmq4Client:
    return Jmq4Client("127.0.0.1", port, app="app1", token=token, timeout=5)


def _reset(client: Jmq4Client) -> None:
    """Abort the client's sockets with a TCP RST (SO_LINGER 0), as a killed process's
    kernel may, without REMOVE_CONNECTION."""
    for conn in client._connections.values():
        transport = conn._writer.transport
        sock = transport.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        transport.abort()


async def _scenario(port: int, token: str) -> float:
    bodies = [b"b%d" % i for i in range(20)]
    async with _client(port, token) as producer:
        await producer.produce("local", bodies, partition=0)
    crashed = _client(port, token)
    assert [m.body for m in await crashed.fetch("local", count=50)] == bodies
    async with _client(port, token) as other:
        parked = asyncio.create_task(other.fetch("local", count=50, long_poll_ms=10_000))
        await asyncio.sleep(0.5)
        assert not parked.done()  # the lock holds while the first consumer is connected
        reset_at = time.monotonic()
        _reset(crashed)
        got = await parked
        took = time.monotonic() - reset_at
        assert [m.body for m in got] == bodies
        assert set((await other.ack(got)).values()) == {0}
    await crashed.close()
    return took


@pytest.mark.django_db(transaction=True)
def test_a_reset_consumer_connection_hands_its_batch_on_within_1s(redis_url, tmp_path):
    catalog = build_catalog(redis_url)  # app1's ack timeout on `local`: 30 s
    brokers = BrokerProcesses(redis_url, tmp_path)
    try:
        brokers.start(1, catalog.ports[1])
        took = asyncio.run(_scenario(catalog.ports[1], catalog.token))
    finally:
        codes = brokers.stop_all()
    print(f"redelivered {took * 1000:.0f} ms after the reset")
    assert took < 1.0
    assert codes == {1: 0}
