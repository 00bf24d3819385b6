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
