"""The spec-written load generator of ``bench/zbus_load.py`` against a real zbus server:
what it counts as produced must be stored, what it counts as consumed (streaming or long
polling) must be every one of those, its RPC calls must be answered, and a stalled read
must end in a timeout rather than hang (or the zbus benchmark measures nothing)."""

from __future__ import annotations

import asyncio
import time

import pytest

from bench import zbus_load
from tests.cycles import project_cycles


async def test_counts_what_was_stored_and_consumes_all_of_it(broker):
    produced = await zbus_load.produce(broker.port, ["orders"], per_mq=500, in_flight=16)
    assert produced.count == 500 == produced.per_mq[0]
    assert produced.errors == 0
    assert (await broker.engine.queue_stats("orders")).ready == 500
    streamed = await zbus_load.stream_consume(broker.port, ["orders"], [500])
    assert streamed.count == 500
    await zbus_load.produce(broker.port, ["orders"], per_mq=200, in_flight=16)
    polled = await zbus_load.long_poll(broker.port, ["orders"], [200], seconds=10)
    assert polled.count == 200
    assert polled.errors == 0
    assert polled.note == ""


async def test_a_long_poll_on_an_empty_mq_ends_at_its_stall_limit(broker):
    started = time.monotonic()
    polled = await zbus_load.long_poll(broker.port, ["orders"], [1], seconds=5, stall=0.3)
    assert polled.count == 0
    assert "stalled at 0" in polled.note
    assert time.monotonic() - started < 3


async def test_rpc_calls_are_answered(broker):
    called = await zbus_load.rpc(broker.port, "svc", 0.5, callers=2, workers=1)
    assert called.count > 0
    assert called.lost == 0
    assert called.waiting == 0.0


async def test_a_read_ends_when_the_server_closes(broker):
    conn = await zbus_load.Conn.open(broker.port)
    conn.write(b"GET / HTTP/1.1\r\ncontent-length: nonsense\r\n\r\n")
    with pytest.raises(ConnectionError):
        while True:  # an error reply may come first, then the close
            await asyncio.wait_for(conn.read(5), 10)
    conn.close()


async def test_producing_and_consuming_leave_no_cyclic_garbage(broker):
    """Every produce, delivery and settle is freed by reference counting: garbage only a
    collection frees waits for one, and a broker's collection of tens of thousands of
    objects stalled every connection for 20-30 ms (compiled, a closure defined in a
    coroutine made a cycle at every append; see brokers/compiled.py)."""
    await zbus_load.produce(broker.port, ["orders"], per_mq=50, in_flight=8)  # warm
    await zbus_load.long_poll(broker.port, ["orders"], [50], seconds=10)
    with project_cycles() as cycles:
        await zbus_load.produce(broker.port, ["orders"], per_mq=300, in_flight=1)
        polled = await zbus_load.long_poll(broker.port, ["orders"], [300], seconds=10)
    assert polled.count == 300
    assert cycles == {}
