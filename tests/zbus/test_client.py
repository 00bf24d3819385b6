"""The Python client against the server: produce, consume, local timeout, streaming."""

from __future__ import annotations

import pytest

from brokers.clients.zbus import ZbusClient, ZbusError
from tests.zbus.conftest import SECRET

pytestmark = pytest.mark.django_db(transaction=True)


async def test_client_produce_consume_and_errors(broker) -> None:
    async with ZbusClient("127.0.0.1", broker.port, timeout=5) as c:
        # a local timeout, as 2015 clients have; "one" may still race to the abandoned
        # consume: past retire_fraction of the assumed client timeout (0.8 of 1.0 s here),
        # the re-sent consume right after it gets it again (§13.1) — either way, "one" first
        assert await c.consume("orders", wait_s=0.9) is None
        ack = await c.produce("orders", "one", headers={"x-trace": "t1"})
        assert ack is not None and ack.status == 200
        await c.produce("orders", b"two", ack=False)
        first = await c.consume("orders")  # the re-sent consume settles nothing yet in flight
        assert first is not None and (first.body, first.headers["x-trace"]) == (b"one", "t1")
        second = await c.consume("orders", window=5)
        assert second is not None and second.body == b"two"
        with pytest.raises(ZbusError) as err:
            await c.produce("secure", "x")
        assert err.value.reply.status == 403
        assert (await c.produce("secure", "x", token=SECRET)) is not None
        with pytest.raises(ZbusError):
            await c.consume("nothere")


async def test_client_stream_pubsub(broker) -> None:
    async with (
        ZbusClient("127.0.0.1", broker.port, timeout=5) as sub,
        ZbusClient("127.0.0.1", broker.port, timeout=5) as pub,
    ):
        stream = sub.stream("news", topic="*")
        first = stream.__anext__()
        import asyncio

        pending = asyncio.ensure_future(first)
        for _ in range(50):  # wait until the subscription is registered
            info = (await pub.data())["mqTable"]["news"]
            if info["consumerCount"]:
                break
        await pub.produce("news", "hello", topic="any")
        got = await asyncio.wait_for(pending, 5)
        assert (got.status, got.body) == (200, b"hello")
        await stream.aclose()
