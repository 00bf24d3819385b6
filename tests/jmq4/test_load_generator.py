"""The spec-written consumer of ``bench/jmq4_load.py`` against a real JMQ4 server: it must
consume and ack exactly what was produced (or the consume benchmark measures nothing), and
refuse a response whose message fields do not add up to its size."""

from __future__ import annotations

import struct

import pytest

from bench import jmq4_load
from brokers.clients.jmq4 import Jmq4Client, OutgoingMessage

pytestmark = pytest.mark.django_db


async def test_consumes_and_acks_everything_produced(catalog, brokers):
    async with Jmq4Client("127.0.0.1", catalog.ports[1], app="app1", token=catalog.token) as c:
        for partition in (0, 1):
            for _ in range(3):
                await c.produce(
                    "local",
                    [
                        OutgoingMessage(
                            b"b" * (10 * i), business_id=f"id-{i}", attributes={"k": f"v{i}"}
                        )
                        for i in range(20)
                    ],
                    partition=partition,
                )
        result = await jmq4_load.consume(
            catalog.ports[1], topic="local", app="app1", token=catalog.token, total=10_000,
            connections=2, loops=3, count=7,
        )  # fmt: skip
        assert result.messages == 120  # stopped when empty, every message counted once
        indexes = await c.fetch_index("local", [0, 1])
        assert {p: ack for p, (ack, _, _) in indexes.items()} == {0: 60, 1: 60}
        assert await c.fetch("local") == []


def test_a_message_whose_fields_disagree_with_its_size_is_refused():
    message = bytearray(73)
    struct.pack_into(">ihq", message, 0, 74, 0, 5)  # declares one byte more than it has
    payload = bytearray(struct.pack(">hh", 1, 1) + b"t" + struct.pack(">h", 1) + message + bytes(4))
    with pytest.raises(jmq4_load.ProtocolError):
        jmq4_load.fetched_indexes(bytes(payload))
    struct.pack_into(">i", payload, 7, 73)
    assert jmq4_load.fetched_indexes(bytes(payload)) == (0, {0: [5]})


VECTOR_PRODUCE = bytes.fromhex(
    "00000086cafebebe0402000000073200000174876e80000001000274310000000013880300010000005aff"
    "ff0000000000000000000000001234018c00901f7f0000010000000000000000000000000174876e8000000000"
    "00000000003610a68600000000000568656c6c6f0562697a2d3100036b3d76000000000461707031000461707031"
)
VECTOR_PRODUCED = bytes.fromhex(
    "00000038cafebebe040300000007ce00000174876e80000000000001000274310000000000010000000000000000"
    "002a00000174876e8000"
)


def test_the_producer_writes_the_spec_vector():
    message = jmq4_load.broker_message(
        b"hello", app="app1", send_time=1_600_000_000_000, business_id="biz-1",
        attributes="k=v", client_ip=bytes.fromhex("901f7f000001"),
    )  # fmt: skip
    payload = jmq4_load.produce_message("t1", "app1", [message], qos=3, timeout_ms=5000)
    assert payload == VECTOR_PRODUCE[23:]  # after the header
    assert jmq4_load.produced_code(VECTOR_PRODUCED[26:]) == 0  # after header and status
    with pytest.raises(jmq4_load.ProtocolError):
        jmq4_load.produced_code(VECTOR_PRODUCED[26:] + b"\0")


async def test_times_every_message_it_produced_and_acks_it(catalog, brokers):
    result = await jmq4_load.latency(
        catalog.ports[1], topic="local", app="app1", token=catalog.token, partitions=2,
        rate=1000, seconds=0.6, warmup=0.2,
    )  # fmt: skip
    assert result.produced >= 600  # 10 per tick, ticks of 10 ms over 0.8 s
    assert 0 < result.samples <= result.produced
    assert 0 < result.p50_ms <= result.p99_ms < 1000
    async with Jmq4Client("127.0.0.1", catalog.ports[1], app="app1", token=catalog.token) as c:
        indexes = await c.fetch_index("local", [0, 1])
        assert sum(ack for ack, _, _ in indexes.values()) == result.produced  # all acked
        assert await c.fetch("local") == []
