"""Byte-exact reference vectors (jmq4_vectors.txt): decode, check fields, re-encode."""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass, fields, replace
from pathlib import Path

import pytest

from brokers.protocols import jmq4

VECTORS_FILE = Path(__file__).with_name("jmq4_vectors.txt")
REPOSITORY = Path(__file__).resolve().parents[3]
SHARED_VECTORS_FILE = REPOSITORY.parent / "shared" / "protocols" / "jmq4_vectors.txt"
"""The spec's own copy, beside the checkout (README: ``../shared/protocols/``)."""
SEND_TIME = 1_600_000_000_000


@dataclass(frozen=True)
class Vector:
    """One block of the vectors file."""

    title: str
    data: bytes
    notes: tuple[str, ...]

    @property
    def is_bare_message(self) -> bool:
        return self.title.startswith("BrokerMessage")

    @property
    def is_bare_batch(self) -> bool:
        return self.title.startswith("BatchMessageSerializer")


def load_vectors() -> list[Vector]:
    vectors: list[Vector] = []
    for block in VECTORS_FILE.read_text(encoding="utf-8").split("### ")[1:]:
        title, hex_line, *notes = [line for line in block.splitlines() if line.strip()]
        vectors.append(Vector(title, bytes.fromhex(hex_line), tuple(notes)))
    return vectors


VECTORS = load_vectors()
FRAME_VECTORS = [v for v in VECTORS if not (v.is_bare_message or v.is_bare_batch)]


def by_title(prefix: str) -> Vector:
    (vector,) = [v for v in VECTORS if v.title.startswith(prefix)]
    return vector


def rebuilt(message: jmq4.BrokerMessage) -> jmq4.BrokerMessage:
    """The same message without its cached raw bytes, so encoding goes field by field."""
    return jmq4.BrokerMessage(
        **{f.name: getattr(message, f.name) for f in fields(message) if f.init}
    )


def test_vector_file_parsed() -> None:
    assert len(VECTORS) == 16
    assert len(FRAME_VECTORS) == 14


@pytest.mark.skipif(not SHARED_VECTORS_FILE.exists(), reason="shared spec directory absent")
def test_vector_copy_matches_shared_spec() -> None:
    assert VECTORS_FILE.read_bytes() == SHARED_VECTORS_FILE.read_bytes()


@pytest.mark.parametrize("vector", FRAME_VECTORS, ids=lambda v: v.title[:50])
def test_frame_vector_round_trips(vector: Vector) -> None:
    frame = jmq4.decode_frame(vector.data)
    assert jmq4.encode_frame(frame.header, frame.payload) == vector.data
    assert frame.encode() == vector.data


_HEADER_NOTE = re.compile(
    r"header=JoyQueueHeader\{version=(\d+), qosLevel=(\w+), requestId=(-?\d+), type=(-?\d+), "
    r"time=(\d+), status=(\d+), error='([^']*)'\}"
)


@pytest.mark.parametrize("vector", FRAME_VECTORS, ids=lambda v: v.title[:50])
def test_frame_vector_header_matches_reference_reading(vector: Vector) -> None:
    (note,) = [n for n in vector.notes if n.startswith("decoded:")]
    match = _HEADER_NOTE.search(note)
    assert match is not None
    version, qos, request_id, type_, send_time, status, error = match.groups()
    header = jmq4.decode_frame(vector.data).header
    assert header.version == int(version)
    assert header.qos is jmq4.QosLevel[qos]
    assert header.request_id == int(request_id)
    assert header.type == int(type_)
    assert header.send_time == int(send_time) == SEND_TIME
    assert header.status == int(status)
    assert header.error == ("" if error == "null" else error)
    assert header.is_response == (header.type < 0)


def test_frame_vectors_reencode_messages_field_by_field() -> None:
    for vector in FRAME_VECTORS:
        frame = jmq4.decode_frame(vector.data)
        for message in _messages_of(frame.payload):
            assert rebuilt(message).to_bytes() == message.raw


def _messages_of(payload: jmq4.Payload) -> list[jmq4.BrokerMessage]:
    if isinstance(payload, jmq4.ProduceMessageRequest):
        return [m for topic in payload.topics for m in topic.messages]
    if isinstance(payload, jmq4.FetchTopicMessageResponse):
        return [m for topic in payload.topics for m in topic.messages]
    return []


def test_bare_broker_message() -> None:
    vector = by_title("BrokerMessage")
    message = jmq4.BrokerMessage.from_bytes(vector.data)
    assert message.raw == vector.data
    assert message.to_bytes() == vector.data
    assert rebuilt(message).to_bytes() == vector.data
    assert replace(message, size=None).to_bytes() == vector.data
    assert "bodyCRC=907060870 size=90" in vector.notes
    assert message.size == message.encoded_size == 90
    assert message.body_crc == 907060870 == zlib.crc32(b"hello")
    assert (message.body, message.business_id, message.app) == (b"hello", "biz-1", "app1")
    assert message.attribute_map() == {"k": "v"}
    assert message.partition == -1
    assert message.magic == 0x1234
    assert message.sys_code == 0x018C
    assert message.send_time == SEND_TIME
    assert message.client_ip.hex() == "901f7f000001" + "00" * 10
    assert message.client_address() == ("127.0.0.1", 8080)
    assert message.flags == jmq4.SysCode(source=jmq4.Source.JOYQUEUE, short_address=True)
    assert jmq4.validate_message(message) is None


def test_bare_batch_body() -> None:
    vector = by_title("BatchMessageSerializer")
    items = jmq4.decode_batch(vector.data)
    assert items == (
        jmq4.BatchItem(body=b"a", business_id="x"),
        jmq4.BatchItem(body=b"bc", attributes="k=v"),
    )
    assert jmq4.encode_batch(items) == vector.data
    assert jmq4.validate_batch(vector.data, 2) is None
    assert jmq4.validate_batch(vector.data, 1) == jmq4.Code.CN_PARAM_ERROR


def test_add_connection_fields() -> None:
    payload = jmq4.decode_frame(by_title("ADD_CONNECTION request").data).payload
    assert payload == jmq4.AddConnectionRequest(
        app="app1",
        token="tok",
        region="r1",
        language=jmq4.Language.PYTHON,
        version="4.2.7",
        ip="127.0.0.1",
        time=SEND_TIME,
        sequence=1,
    )


def test_add_connection_response_fields() -> None:
    payload = jmq4.decode_frame(by_title("ADD_CONNECTION_RESPONSE").data).payload
    assert payload == jmq4.AddConnectionResponse(connection_id="cid-1", notification="")


def test_boolean_ack_vectors() -> None:
    ok = jmq4.decode_frame(by_title("BOOLEAN_ACK(-128) response success").data)
    assert isinstance(ok.payload, jmq4.BooleanAck)
    failed = jmq4.decode_frame(by_title("BOOLEAN_ACK(-128) response status=132").data)
    assert failed.header.status == jmq4.Code.FW_CONNECTION_NOT_EXISTS
    assert failed.header.error == "conn"


def test_fetch_cluster_fields() -> None:
    request = jmq4.decode_frame(by_title("FETCH_CLUSTER request").data).payload
    assert request == jmq4.FetchClusterRequest(topics=("t1",), app="app1")
    response = jmq4.decode_frame(by_title("FETCH_CLUSTER_RESPONSE").data).payload
    assert response == jmq4.FetchClusterResponse(
        topics=(
            jmq4.ClusterTopic(
                topic="t1",
                producer_policy=jmq4.ProducerPolicy(nearby=True, timeout=3000),
                consumer_policy=jmq4.ConsumerPolicy(
                    nearby=True,
                    retry=True,
                    ack_timeout=60000,
                    batch_size=10,
                    err_times=3,
                    max_partition_num=1,
                    read_retry_probability=10,
                ),
                topic_type=jmq4.TopicType.TOPIC,
                partition_groups=(jmq4.PartitionGroup(group_id=0, leader=1, partitions=(0, 1)),),
                code=jmq4.Code.SUCCESS,
            ),
        ),
        brokers=(
            jmq4.ClusterBroker(
                id=1,
                host="127.0.0.1",
                port=50088,
                data_center="dc1",
                nearby=True,
                weight=0,
                sys_code=0,
                permission=3,
            ),
        ),
    )


def test_produce_fields() -> None:
    request = jmq4.decode_frame(by_title("PRODUCE_MESSAGE request").data).payload
    assert isinstance(request, jmq4.ProduceMessageRequest)
    (topic,) = request.topics
    assert (topic.topic, topic.tx_id, topic.timeout, topic.qos) == (
        "t1",
        "",
        5000,
        jmq4.QosLevel.REPLICATION,
    )
    assert request.app == "app1"
    (message,) = topic.messages
    assert message == jmq4.BrokerMessage.from_bytes(by_title("BrokerMessage").data)
    response = jmq4.decode_frame(by_title("PRODUCE_MESSAGE_RESPONSE").data).payload
    assert response == jmq4.ProduceMessageResponse(
        topics=(
            jmq4.ProduceTopicResult(
                topic="t1",
                code=jmq4.Code.SUCCESS,
                items=(jmq4.ProducedItem(partition=0, index=42, start_time=SEND_TIME),),
            ),
        )
    )


def test_fetch_topic_message_fields() -> None:
    request = jmq4.decode_frame(by_title("FETCH_TOPIC_MESSAGE request").data).payload
    assert request == jmq4.FetchTopicMessageRequest(
        topics=(jmq4.TopicFetch(topic="t1", count=10),),
        app="app1",
        ack_timeout=30000,
        long_poll_timeout=1000,
    )
    response = jmq4.decode_frame(by_title("FETCH_TOPIC_MESSAGE_RESPONSE(-30) 1 msg").data).payload
    assert isinstance(response, jmq4.FetchTopicMessageResponse)
    (entry,) = response.topics
    (message,) = entry.messages
    assert (entry.topic, entry.code, message.partition, message.index) == ("t1", 0, 0, 42)
    empty = jmq4.decode_frame(by_title("FETCH_TOPIC_MESSAGE_RESPONSE(-30) empty").data).payload
    assert empty == jmq4.FetchTopicMessageResponse(topics=(jmq4.TopicMessages(topic="t1"),))


def test_stored_message_rewrite_matches_fetch_vector() -> None:
    """The produced message, rewritten as the store does, is the message the fetch returns."""
    buf = bytearray(by_title("BrokerMessage").data)
    jmq4.rewrite_message(buf, partition=0, index=42, term=0, store_time=0)
    fetched = jmq4.decode_frame(by_title("FETCH_TOPIC_MESSAGE_RESPONSE(-30) 1 msg").data)
    assert isinstance(fetched.payload, jmq4.FetchTopicMessageResponse)
    assert bytes(buf) == fetched.payload.topics[0].messages[0].raw


def test_commit_ack_fields() -> None:
    request = jmq4.decode_frame(by_title("COMMIT_ACK request").data).payload
    assert request == jmq4.CommitAckRequest(
        topics=(
            jmq4.AckTopic(
                topic="t1",
                partitions=(
                    jmq4.AckPartition(
                        partition=0,
                        acks=(
                            jmq4.AckEntry(partition=0, index=42, retry_type=jmq4.RetryType.NONE),
                            jmq4.AckEntry(
                                partition=0, index=43, retry_type=jmq4.RetryType.EXCEPTION
                            ),
                        ),
                    ),
                ),
            ),
        ),
        app="app1",
    )
    response = jmq4.decode_frame(by_title("COMMIT_ACK_RESPONSE").data).payload
    assert response == jmq4.CommitAckResponse(
        topics=(jmq4.TopicPartitionCodes(topic="t1", partitions=(jmq4.PartitionCode(),)),)
    )


def test_heartbeat_vector_answered_by_boolean_ack_vector() -> None:
    request = jmq4.decode_frame(by_title("HEARTBEAT request").data)
    ack = jmq4.boolean_ack(request.header, send_time=SEND_TIME)
    assert ack.encode() == by_title("BOOLEAN_ACK(-128) response success").data
    rejected = jmq4.boolean_ack(
        request.header, jmq4.Code.FW_CONNECTION_NOT_EXISTS, "conn", send_time=SEND_TIME
    )
    assert rejected.encode() == by_title("BOOLEAN_ACK(-128) response status=132").data


@pytest.mark.parametrize(
    ("request_title", "response_title"),
    [
        ("ADD_CONNECTION request", "ADD_CONNECTION_RESPONSE"),
        ("FETCH_CLUSTER request", "FETCH_CLUSTER_RESPONSE"),
        ("PRODUCE_MESSAGE request", "PRODUCE_MESSAGE_RESPONSE"),
        ("FETCH_TOPIC_MESSAGE request", "FETCH_TOPIC_MESSAGE_RESPONSE(-30) empty"),
        ("COMMIT_ACK request", "COMMIT_ACK_RESPONSE"),
    ],
)
def test_typed_response_header_echoes_request(request_title: str, response_title: str) -> None:
    request = jmq4.decode_frame(by_title(request_title).data)
    expected = jmq4.decode_frame(by_title(response_title).data)
    frame = jmq4.response_frame(request.header, expected.payload)
    assert frame.encode() == by_title(response_title).data
