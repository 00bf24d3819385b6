"""Session rules, framing errors and header handling, through raw sockets."""

from __future__ import annotations

import asyncio
import struct

import pytest

from brokers.protocols.jmq4 import (
    AddConnectionRequest,
    AddConnectionResponse,
    AddConsumerRequest,
    AddProducerRequest,
    Code,
    CommandType,
    FetchClusterRequest,
    FetchClusterResponse,
    FetchHealthRequest,
    FetchIndexRequest,
    HeartbeatRequest,
    IndexTopic,
    QosLevel,
    RemoveConnectionRequest,
    RemoveConsumerRequest,
    TopicType,
)
from tests.jmq4.raw import RawClient, frame_bytes, now_ms, request_header

pytestmark = pytest.mark.django_db


async def test_add_connection_checks_token_and_is_idempotent(catalog, brokers):
    raw = await RawClient.open(catalog.ports[1])
    bad = await raw.call(AddConnectionRequest(app="app1", token="wrong"))
    assert bad.header.type == CommandType.BOOLEAN_ACK
    assert bad.header.status == Code.CN_AUTHENTICATION_ERROR and "app1" in bad.header.error
    unknown = await raw.call(AddConnectionRequest(app="nobody", token="x"))
    assert unknown.header.status == Code.CN_AUTHENTICATION_ERROR
    first = await raw.login("app1", catalog.token)
    assert isinstance(first.payload, AddConnectionResponse) and first.payload.connection_id
    again = await raw.login("app1", catalog.token)
    assert again.payload.connection_id == first.payload.connection_id
    # a repeat is checked too (it answered success with any token or app)
    wrong = await raw.call(AddConnectionRequest(app="app1", token="wrong"))
    assert wrong.header.status == Code.CN_AUTHENTICATION_ERROR
    other = await raw.call(AddConnectionRequest(app="other", token=catalog.other_token))
    assert other.header.status == Code.CN_AUTHENTICATION_ERROR and "app1" in other.header.error
    still = await raw.login("app1", catalog.token)
    assert still.payload.connection_id == first.payload.connection_id
    await raw.close()


async def test_typed_reply_echoes_request_header(catalog, brokers):
    raw = await RawClient.open(catalog.ports[1])
    sent = now_ms() - 1234
    reply = await raw.call(FetchHealthRequest(), request_id=4242, version=2, send_time=sent)
    assert reply.header.type == CommandType.FETCH_HEALTH_RESPONSE
    assert (reply.header.version, reply.header.request_id, reply.header.send_time) == (
        2,
        4242,
        sent,
    )
    assert reply.header.qos == QosLevel.RECEIVE and reply.payload.point == 0.0
    ack = await raw.call(HeartbeatRequest(), request_id=9, version=1)
    assert ack.header.type == CommandType.BOOLEAN_ACK and ack.header.status == 0
    assert ack.header.version == 4 and ack.header.request_id == 9
    await raw.close()


async def test_commands_need_an_authorized_connection(catalog, brokers):
    raw = await RawClient.open(catalog.ports[1])
    before = await raw.call(FetchClusterRequest(topics=("orders",), app="app1"))
    assert before.header.status == Code.FW_CONNECTION_NOT_EXISTS
    removed = await raw.call(RemoveConnectionRequest())
    assert removed.header.status == Code.FW_CONNECTION_NOT_EXISTS
    await raw.login("app1", catalog.token)
    foreign = await raw.call(FetchClusterRequest(topics=("orders",), app="other"))
    assert foreign.header.status == Code.FW_CONNECTION_NOT_EXISTS
    sub_app = await raw.call(FetchClusterRequest(topics=("orders",), app="app1.web"))
    assert sub_app.header.type == CommandType.FETCH_CLUSTER_RESPONSE
    bye = await raw.call(RemoveConnectionRequest())
    assert bye.header.status == 0
    after = await raw.call(FetchClusterRequest(topics=("orders",), app="app1"))
    assert after.header.status == Code.FW_CONNECTION_NOT_EXISTS
    await raw.close()


async def test_admin_app_acts_for_any_app(catalog, brokers):
    raw = await RawClient.open(catalog.ports[1])
    await raw.login("root", catalog.admin_token)
    reply = await raw.call(FetchClusterRequest(topics=("orders",), app="app1"))
    assert reply.header.type == CommandType.FETCH_CLUSTER_RESPONSE
    await raw.close()


async def test_registration_needs_subscriptions(catalog, brokers):
    raw = await RawClient.open(catalog.ports[1])
    await raw.login("other", catalog.other_token)
    denied = await raw.call(AddConsumerRequest(topics=("orders",), app="other"))
    assert denied.header.status == Code.CN_NO_PERMISSION
    denied = await raw.call(AddProducerRequest(topics=("orders",), app="other"))
    assert denied.header.status == Code.CN_NO_PERMISSION
    await raw.close()
    raw = await RawClient.open(catalog.ports[1])
    await raw.login("app1", catalog.token)
    first = await raw.call(AddConsumerRequest(topics=("orders", "local"), app="app1", sequence=3))
    ids = [e.id for e in first.payload.entries]
    assert [e.topic for e in first.payload.entries] == ["orders", "local"] and all(ids)
    again = await raw.call(AddConsumerRequest(topics=("orders", "local"), app="app1", sequence=4))
    assert [e.id for e in again.payload.entries] == ids
    removed = await raw.call(RemoveConsumerRequest(topics=("orders",), app="app1"))
    assert removed.header.type == CommandType.BOOLEAN_ACK and removed.header.status == 0
    await raw.close()


@pytest.mark.parametrize("version", [1, 2, 3, 4])
async def test_fetch_cluster_by_header_version(catalog, brokers, version):
    raw = await RawClient.open(catalog.ports[1])
    await raw.login("app1", catalog.token)
    reply = await raw.call(
        FetchClusterRequest(topics=("orders", "missing"), app="app1"), version=version
    )
    assert reply.header.version == version
    payload: FetchClusterResponse = reply.payload
    orders, missing = payload.topics
    assert missing.code == Code.FW_TOPIC_NOT_EXIST and missing.partition_groups == ()
    assert orders.code == 0 and orders.topic_type == TopicType.TOPIC
    assert [(g.group_id, g.leader, g.partitions) for g in orders.partition_groups] == [
        (0, 1, (0, 1)),
        (1, 2, (2, 3)),
    ]
    assert orders.consumer_policy.ack_timeout == 30_000 and orders.consumer_policy.batch_size == 10
    assert orders.producer_policy is not None
    by_id = {b.id: b for b in payload.brokers}
    assert by_id[1].port == catalog.ports[1] and by_id[2].port == catalog.ports[2]
    if version >= 2:
        assert by_id[1].permission == 3
    else:
        assert by_id[1].permission == 3 and by_id[1].sys_code == 0  # defaults: not on the wire
    assert (orders.params != ()) == (version >= 4)
    await raw.close()


@pytest.mark.parametrize("version", [1, 2, 3, 4])
async def test_fetch_index_by_header_version(catalog, brokers, version):
    raw = await RawClient.open(catalog.ports[1])
    await raw.login("app1", catalog.token)
    reply = await raw.call(
        FetchIndexRequest(topics=(IndexTopic(topic="local", partitions=(0, 9)),), app="app1"),
        version=version,
    )
    known, unknown = reply.payload.topics[0].partitions
    assert (known.index, known.code) == (0, 0) and unknown.index == -1
    raw_bytes = await _raw_fetch_index(raw, version)
    with_range = 2 + 8 + 4 + 8 + 8
    assert len(raw_bytes) == 26 + 2 + 2 + len("local") + 2 + (with_range if version >= 3 else 14)
    await raw.close()


async def _raw_fetch_index(raw: RawClient, version: int) -> bytes:
    raw.send(
        frame_bytes(
            FetchIndexRequest(topics=(IndexTopic(topic="local", partitions=(1,)),), app="app1"),
            version=version,
        )
    )
    return await raw.read_raw()


async def test_one_way_requests_get_no_reply(catalog, brokers):
    raw = await RawClient.open(catalog.ports[1])
    raw.send(frame_bytes(HeartbeatRequest(), 1, qos=QosLevel.ONE_WAY))
    raw.send(frame_bytes(FetchClusterRequest(topics=("x",), app="app1"), 2, qos=QosLevel.ONE_WAY))
    reply = await raw.call(HeartbeatRequest(), request_id=3)
    assert reply.header.request_id == 3
    await raw.close()


async def test_unknown_type_is_skipped_and_connection_stays(catalog, brokers):
    raw = await RawClient.open(catalog.ports[1])
    header = request_header(34, 5)
    body = bytearray(struct.pack(">iIbbibq", 0, 0xCAFEBEBE, 4, 2, 5, 34, now_ms())) + b"\x01\x02"
    struct.pack_into(">i", body, 0, len(body))
    raw.send(bytes(body))
    reply = await raw.call(HeartbeatRequest(), request_id=6)
    assert reply.header.request_id == 6 and header.type == 34
    await raw.close()


async def test_malformed_payload_gets_status_6(catalog, brokers):
    raw = await RawClient.open(catalog.ports[1])
    good = bytearray(frame_bytes(HeartbeatRequest(), 11))
    extra = good + b"\x00"
    struct.pack_into(">i", extra, 0, len(extra))
    raw.send(bytes(extra))
    reply = await raw.read()
    assert reply.header.type == CommandType.BOOLEAN_ACK
    assert reply.header.status == Code.CN_PARAM_ERROR and reply.header.request_id == 11
    raw.send(bytes(_bad_language(catalog.token)))
    reply = await raw.read()
    assert reply.header.status == Code.CN_PARAM_ERROR and reply.header.request_id == 13
    # a negative array count
    cluster = bytearray(frame_bytes(FetchClusterRequest(topics=(), app="app1"), 14))
    struct.pack_into(">h", cluster, 23, -1)
    raw.send(bytes(cluster))
    reply = await raw.read()
    assert reply.header.status == Code.CN_PARAM_ERROR and reply.header.request_id == 14
    assert (await raw.call(HeartbeatRequest(), request_id=15)).header.request_id == 15
    await raw.close()


def _bad_language(token: str) -> bytes:
    data = bytearray(frame_bytes(AddConnectionRequest(app="app1", token=token), 13))
    # username, password empty (1 byte each), app S1, token S1, region, namespace empty
    offset = 23 + 1 + 1 + 1 + len("app1") + 1 + len(token) + 1 + 1
    data[offset] = 99
    return bytes(data)


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(struct.pack(">iI", 30, 0xDEADBEEF) + bytes(22), id="bad-magic"),
        pytest.param(struct.pack(">iI", 64 * 1024 * 1024, 0xCAFEBEBE) + bytes(22), id="oversized"),
        pytest.param(struct.pack(">iI", 10, 0xCAFEBEBE) + bytes(2), id="too-short"),
        pytest.param(struct.pack(">iIb", 30, 0xCAFEBEBE, 9) + bytes(21), id="bad-version"),
    ],
)
async def test_fatal_framing_closes_the_connection(catalog, brokers, data):
    raw = await RawClient.open(catalog.ports[1])
    raw.send(data)
    assert await raw.closed()
    other = await RawClient.open(catalog.ports[1])  # the server lives on
    assert (await other.call(HeartbeatRequest())).header.status == 0
    await other.close()


async def test_truncated_frame_stores_nothing_and_waits(catalog, brokers):
    raw = await RawClient.open(catalog.ports[1])
    await raw.login("app1", catalog.token)
    frame = frame_bytes(HeartbeatRequest(), 21)
    raw.send(frame[:-3])
    with pytest.raises(TimeoutError):
        await raw.read(wait=0.3)
    raw.send(frame[-3:])
    assert (await raw.read()).header.request_id == 21
    await raw.close()


async def test_pipelined_requests_all_answered(catalog, brokers):
    raw = await RawClient.open(catalog.ports[1])
    await raw.login("app1", catalog.token)
    for i in range(100, 160):
        raw.send(frame_bytes(FetchClusterRequest(topics=("orders",), app="app1"), i))
    ids = {(await raw.read()).header.request_id for _ in range(60)}
    assert ids == set(range(100, 160))
    await asyncio.sleep(0)
    await raw.close()


async def test_names_no_topic_or_app_can_have_get_code_6(catalog, brokers):
    """§8.5: a topic or app name outside 1–255 characters or with control characters gets
    code 6 wherever it appears (FETCH_CLUSTER and FETCH_TOPIC_MESSAGE answered 189, "no
    such topic", and an app name 132, "not authorized")."""
    from brokers.protocols.jmq4 import FetchTopicMessageRequest, TopicFetch

    raw = await RawClient.open(catalog.ports[1])
    await raw.login("app1", catalog.token)
    for bad in ("", "lo\x01cal", "local\n", "x" * 256):
        reply = await raw.call(FetchClusterRequest(topics=(bad, "missing"), app="app1"))
        invalid, missing = reply.payload.topics
        assert (invalid.code, missing.code) == (Code.CN_PARAM_ERROR, Code.FW_TOPIC_NOT_EXIST)
        fetched = await raw.call(
            FetchTopicMessageRequest(topics=(TopicFetch(topic=bad),), app="app1")
        )
        assert fetched.payload.topics[0].code == Code.CN_PARAM_ERROR, repr(bad)
    for bad_app in ("", "ap\x01p", "a" * 256):
        reply = await raw.call(FetchClusterRequest(topics=("orders",), app=bad_app))
        assert reply.header.type == CommandType.BOOLEAN_ACK
        assert reply.header.status == Code.CN_PARAM_ERROR, repr(bad_app)
    await raw.close()
