"""PRODUCE_MESSAGE on the one-walk path: many messages per entry, their items, and every
invalid-message rule answered with CN_PARAM_ERROR before anything is stored."""

from __future__ import annotations

from dataclasses import replace

import pytest

from brokers.clients.jmq4 import OutgoingMessage, build_batch, build_message
from brokers.protocols.jmq4 import (
    BrokerMessage,
    Code,
    FetchIndexRequest,
    IndexTopic,
    ProduceMessageRequest,
    ProduceTopic,
    WireMessages,
)
from tests.jmq4.raw import RawClient

pytestmark = pytest.mark.django_db


def message(body: bytes = b"m", partition: int = 0, **changes: object) -> BrokerMessage:
    built = build_message(OutgoingMessage(body), app="app1", partition=partition, compress=False)
    if changes:
        built = replace(built, **changes)
        built = replace(built, size=built.encoded_size)
    return built


def request(
    *messages: BrokerMessage, topic: str = "local", tx_id: str = ""
) -> ProduceMessageRequest:
    entry = ProduceTopic(topic=topic, tx_id=tx_id, messages=messages)
    return ProduceMessageRequest(topics=(entry,), app="app1")


async def right_index(raw: RawClient, partition: int) -> int:
    reply = await raw.call(
        FetchIndexRequest(topics=(IndexTopic(topic="local", partitions=(partition,)),), app="app1")
    )
    return reply.payload.topics[0].partitions[0].right_index


async def test_many_messages_per_entry_get_consecutive_indexes_and_their_send_times(
    catalog, brokers
):
    raw = await RawClient.open(catalog.ports[1])
    await raw.login("app1", catalog.token)
    msgs = tuple(message(b"b%d" % i, partition=1, send_time=1_000 + i) for i in range(32))
    reply = await raw.call(request(*msgs))
    result = reply.payload.topics[0]
    assert result.code == Code.SUCCESS
    assert [(i.partition, i.index, i.start_time) for i in result.items] == [
        (1, i, 1_000 + i) for i in range(32)
    ]
    # prebuilt wire messages are sent as they are, and a batch takes its items' indexes
    batch = build_batch([OutgoingMessage(b"x")] * 3, app="app1", partition=1, compress=False)
    wire = WireMessages.from_messages((*msgs[:2], batch, msgs[2]))
    reply = await raw.call(
        ProduceMessageRequest(topics=(ProduceTopic(topic="local", messages=wire),), app="app1")
    )
    assert [i.index for i in reply.payload.topics[0].items] == [32, 33, 34, 37]
    assert await right_index(raw, 1) == 38
    await raw.close()


async def test_each_invalid_message_rule_is_param_error_and_stores_nothing(catalog, brokers):
    raw = await RawClient.open(catalog.ports[1])
    await raw.login("app1", catalog.token)
    good = message()
    bad_batch = build_batch([OutgoingMessage(b"x")] * 2, app="app1", partition=0, compress=False)
    invalid = {
        "declared size": replace(good, size=good.encoded_size + 1),
        "reserved sysCode bit": message(sys_code=good.sys_code | 0x2000),
        "long businessId": message(business_id="b" * 101),
        "bad magic": message(magic=0x4321),
        "batch flag 0": message(sys_code=good.sys_code | 0x1000, flag=0),
        "batch body short of its flag": replace(bad_batch, flag=3),
        "compressed batch flag 0": message(sys_code=good.sys_code | 0x1001, flag=0),
        "body over 3 MiB": message(b"z" * (3 * 1024 * 1024 + 1)),
        "partitions differ": None,
    }
    for name, bad in invalid.items():
        msgs = (good, message(partition=1)) if bad is None else (good, bad, good)
        for topic in ("local", "nope", "remote"):  # checked before topic and leader rules
            reply = await raw.call(request(*msgs, topic=topic))
            assert reply.payload.topics[0].code == Code.CN_PARAM_ERROR, (name, topic)
            assert {i.index for i in reply.payload.topics[0].items} == {-1}
        reply = await raw.call(request(*msgs, tx_id="nope"))
        assert reply.payload.topics[0].code == Code.CN_PARAM_ERROR, name
    assert await right_index(raw, 0) == 0
    assert await right_index(raw, 1) == 0
    await raw.close()
