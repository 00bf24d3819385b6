"""FrameDecoder events (spec §8.5), incremental feeding, and the response helpers (§2.2)."""

from __future__ import annotations

import struct
from dataclasses import replace

import pytest

from brokers.protocols import jmq4
from tests.protocols.jmq4.test_vectors import FRAME_VECTORS, SEND_TIME, by_title

HEARTBEAT = by_title("HEARTBEAT request").data
FETCH_CLUSTER = by_title("FETCH_CLUSTER request").data


def request_frame(type_: int, payload: bytes, *, qos: int = 1, version: int = 4) -> bytes:
    """A raw request frame with an arbitrary payload and a correct length prefix."""
    body = struct.pack(">IbBibq", 0xCAFEBEBE, version, qos << 1, 99, type_, SEND_TIME) + payload
    return struct.pack(">i", len(body) + 4) + body


def s2(text: bytes) -> bytes:
    return struct.pack(">h", len(text)) + text


def events(data: bytes, **kwargs: int) -> list[jmq4.Event]:
    decoder = jmq4.FrameDecoder(**kwargs)
    decoder.feed(data)
    return list(decoder)


def only_event(data: bytes) -> jmq4.Event:
    (event,) = events(data)
    return event


# --- fatal errors -----------------------------------------------------------------------


@pytest.mark.parametrize("length", [-1, 0, 4, 22])
def test_length_below_header_is_fatal_at_once(length: int) -> None:
    decoder = jmq4.FrameDecoder()
    decoder.feed(struct.pack(">i", length))
    event = decoder.next_event()
    assert isinstance(event, jmq4.FatalError)
    assert decoder.failed


def test_length_above_maximum_is_fatal_without_waiting() -> None:
    assert isinstance(only_event(struct.pack(">i", 16 * 1024 * 1024 + 1)), jmq4.FatalError)
    decoder = jmq4.FrameDecoder()
    decoder.feed(struct.pack(">i", 16 * 1024 * 1024))
    assert decoder.next_event() is None  # exactly the maximum: wait for the bytes
    assert isinstance(events(FETCH_CLUSTER, max_frame_size=34)[0], jmq4.FatalError)
    assert isinstance(events(FETCH_CLUSTER, max_frame_size=35)[0], jmq4.Frame)


def test_max_frame_size_must_fit_a_header() -> None:
    with pytest.raises(ValueError):
        jmq4.FrameDecoder(max_frame_size=22)


def test_bad_magic_is_fatal_after_eight_bytes() -> None:
    decoder = jmq4.FrameDecoder()
    decoder.feed(HEARTBEAT[:4] + b"\xca\xfe")
    assert decoder.next_event() is None
    decoder.feed(b"\xbe\xbf")
    event = decoder.next_event()
    assert isinstance(event, jmq4.FatalError)
    assert "magic" in event.reason


def test_partial_bad_magic_is_fatal_early() -> None:
    assert isinstance(only_event(HEARTBEAT[:4] + b"\xca\x00"), jmq4.FatalError)


@pytest.mark.parametrize("version", [0, 5, -1, 127])
def test_version_outside_range_is_fatal(version: int) -> None:
    data = bytearray(HEARTBEAT)
    data[8] = version & 0xFF
    decoder = jmq4.FrameDecoder()
    decoder.feed(bytes(data[:9]))
    event = decoder.next_event()
    assert isinstance(event, jmq4.FatalError)
    assert "version" in event.reason


def test_fatal_decoder_discards_everything_after() -> None:
    decoder = jmq4.FrameDecoder()
    decoder.feed(struct.pack(">i", 3) + HEARTBEAT)
    assert [type(e) for e in decoder] == [jmq4.FatalError]
    decoder.feed(HEARTBEAT)
    assert decoder.next_event() is None
    assert decoder.failed
    assert decoder.buffered == 0


# --- per-frame errors -------------------------------------------------------------------


MALFORMED = {
    "leftover byte": request_frame(7, b"\x00"),
    "payload overrun": FETCH_CLUSTER[:-1].replace(b"\x00\x00\x00\x23", b"\x00\x00\x00\x22", 1),
    "negative count": request_frame(10, b"\xff\xff" + s2(b"app")),
    "negative S2 length": request_frame(10, b"\x00\x01\x80\x00" + s2(b"app")),
    "negative S1 length": request_frame(1, b"\xff" + b"\x00" * 40),
    "invalid UTF-8 in S2": request_frame(10, b"\x00\x01" + s2(b"\xff\xfe") + s2(b"app")),
    "invalid UTF-8 in S1": request_frame(1, b"\x02\xc3\x28" + b"\x00" * 40),
    "bad language": request_frame(1, b"\x00" * 6 + b"\x09" + b"\x00\x00" + b"\x00" * 16),
    "negative language": request_frame(1, b"\x00" * 6 + b"\xff" + b"\x00\x00" + b"\x00" * 16),
    "unknown retryType": request_frame(
        32,
        b"\x00\x01"
        + s2(b"t1")
        + b"\x00\x01\x00\x00\x00\x01\x00\x00"
        + bytes(8)
        + b"\x04"
        + s2(b"a"),
    ),
    "negative message body length": request_frame(
        50,
        b"\x00\x01"
        + s2(b"t1")
        + s2(b"")
        + b"\x00\x00\x13\x88\x03\x00\x01"
        + bytes(61)
        + b"\xff\xff\xff\xff",
    ),
    "response error overrun": bytes.fromhex("0000001acafebebe0403000000018000000174876e8000000005"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_payload_reports_header_and_skips_frame(case: str) -> None:
    data = MALFORMED[case]
    assert int.from_bytes(data[:4], "big") == len(data)
    decoder = jmq4.FrameDecoder()
    decoder.feed(data + HEARTBEAT)
    first, second = list(decoder)
    assert isinstance(first, jmq4.MalformedFrame), first
    assert first.code == jmq4.Code.CN_PARAM_ERROR == 6
    assert first.header.request_id in (99, 1, 10, 4)
    assert first.reason
    assert isinstance(second, jmq4.Frame)
    assert isinstance(second.payload, jmq4.HeartbeatRequest)
    assert not decoder.failed


def test_malformed_frame_reply_is_boolean_ack_status_6() -> None:
    event = only_event(request_frame(7, b"\x00"))
    assert isinstance(event, jmq4.MalformedFrame)
    assert event.header.type == jmq4.CommandType.HEARTBEAT
    assert event.needs_reply
    reply = jmq4.decode_frame(jmq4.boolean_ack(event.header, event.code, event.reason).encode())
    assert reply.header.status == 6
    assert reply.header.request_id == 99
    assert reply.header.error == event.reason


def test_one_way_malformed_frame_is_flagged() -> None:
    event = only_event(request_frame(7, b"\x00", qos=0))
    assert isinstance(event, jmq4.MalformedFrame)
    assert event.header.one_way
    assert event.header.qos is jmq4.QosLevel.ONE_WAY
    assert not event.needs_reply


def test_malformed_response_needs_no_reply() -> None:
    event = only_event(MALFORMED["response error overrun"])
    assert isinstance(event, jmq4.MalformedFrame)
    assert event.header.is_response
    assert not event.needs_reply


def test_bool_reads_any_non_zero_byte_as_true() -> None:
    payload = b"\x00\x01" + s2(b"t") + b"\x00\x00\x00\x01\x07" + s2(b"app")
    event = only_event(request_frame(21, payload))
    assert isinstance(event, jmq4.Frame)
    assert event.payload == jmq4.FetchAssignedPartitionRequest(
        topics=(jmq4.AssignmentTopic(topic="t", session_timeout=1, nearby=True),), app="app"
    )


# --- unknown types ----------------------------------------------------------------------


@pytest.mark.parametrize("type_", [34, 100, 101, 102, 103, 0, 9, 127, -10])
def test_unknown_request_type_is_skipped(type_: int) -> None:
    frame = request_frame(type_, b"\x01\x02\x03")
    decoder = jmq4.FrameDecoder()
    decoder.feed(frame + HEARTBEAT)
    first, second = list(decoder)
    assert isinstance(first, jmq4.UnknownCommand)
    assert first.header.type == type_
    assert first.header.request_id == 99
    assert first.size == len(frame)
    assert isinstance(second, jmq4.Frame)


def test_unknown_response_type_is_skipped() -> None:
    data = bytearray(by_title("COMMIT_ACK_RESPONSE").data)
    data[14] = (-34) & 0xFF
    assert isinstance(only_event(bytes(data)), jmq4.UnknownCommand)


# --- incremental feeding ------------------------------------------------------------------


ALL_FRAMES = b"".join(v.data for v in FRAME_VECTORS)


def expected_frames() -> list[jmq4.Frame]:
    return [jmq4.decode_frame(v.data) for v in FRAME_VECTORS]


def test_multiple_frames_in_one_feed() -> None:
    assert events(ALL_FRAMES) == expected_frames()


def test_byte_by_byte_feed() -> None:
    decoder = jmq4.FrameDecoder()
    seen: list[jmq4.Event] = []
    for i in range(len(ALL_FRAMES)):
        decoder.feed(ALL_FRAMES[i : i + 1])
        seen.extend(decoder)
    assert seen == expected_frames()
    assert decoder.buffered == 0


def test_chunked_feed_with_large_backlog_compacts() -> None:
    stream = HEARTBEAT * 4000 + ALL_FRAMES
    decoder = jmq4.FrameDecoder()
    seen: list[jmq4.Event] = []
    for start in range(0, len(stream), 7001):
        decoder.feed(stream[start : start + 7001])
        seen.extend(decoder)
    assert len(seen) == 4000 + len(FRAME_VECTORS)
    assert seen[4000:] == expected_frames()
    assert decoder.buffered == 0


def test_decode_frame_rejects_anything_but_one_frame() -> None:
    with pytest.raises(jmq4.DecodeError):
        jmq4.decode_frame(HEARTBEAT + HEARTBEAT)
    with pytest.raises(jmq4.DecodeError):
        jmq4.decode_frame(HEARTBEAT[:-1])
    with pytest.raises(jmq4.DecodeError, match="MalformedFrame"):
        jmq4.decode_frame(request_frame(7, b"\x00"))
    with pytest.raises(jmq4.DecodeError, match="UnknownCommand"):
        jmq4.decode_frame(request_frame(34, b""))
    with pytest.raises(jmq4.DecodeError, match="FatalError"):
        jmq4.decode_frame(b"\x00\x00\x00\x05\x00")


# --- detection ----------------------------------------------------------------------------


def test_detect_jmq4() -> None:
    for vector in FRAME_VECTORS:
        assert jmq4.detect_jmq4(vector.data[:8]) is True
        assert jmq4.detect_jmq4(vector.data) is True
    assert jmq4.detect_jmq4(b"") is None
    assert jmq4.detect_jmq4(HEARTBEAT[:6]) is None
    assert jmq4.detect_jmq4(b"GET / HTTP/1.1\r\n") is False
    assert jmq4.detect_jmq4(b"\x00\x00\x00\x16\xca\xfe\xbe\xbe") is False
    assert jmq4.detect_jmq4(b"\x00\x00\x00\x17\xca\xfe\x00") is False


# --- response helpers and encoder checks -------------------------------------------------------


def test_response_header_echoes_request() -> None:
    request = jmq4.Header(
        version=2,
        direction=jmq4.Direction.REQUEST,
        qos=jmq4.QosLevel.PERSISTENCE,
        request_id=-5,
        type=jmq4.CommandType.FETCH_INDEX,
        send_time=123,
    )
    header = jmq4.response_header(request)
    assert header == jmq4.Header(
        version=2,
        direction=jmq4.Direction.RESPONSE,
        qos=jmq4.QosLevel.PERSISTENCE,
        request_id=-5,
        type=jmq4.CommandType.FETCH_INDEX_RESPONSE,
        send_time=123,
    )
    encoded = jmq4.response_frame(request, jmq4.FetchIndexResponse()).encode()
    assert encoded[9] == 0x05  # identity: response, QoS 2
    assert jmq4.response_header(replace(request, type=35)) == header


def test_response_helpers_reject_mismatches() -> None:
    heartbeat = jmq4.decode_frame(HEARTBEAT).header
    with pytest.raises(jmq4.EncodeError, match="BooleanAck"):
        jmq4.response_header(heartbeat)
    fetch = jmq4.decode_frame(FETCH_CLUSTER).header
    with pytest.raises(jmq4.EncodeError):
        jmq4.response_frame(fetch, jmq4.FetchIndexResponse())
    with pytest.raises(jmq4.EncodeError):
        jmq4.response_header(jmq4.response_header(fetch))
    with pytest.raises(jmq4.EncodeError):
        jmq4.encode_frame(fetch, jmq4.HeartbeatRequest())


def test_boolean_ack_fresh_header() -> None:
    request = jmq4.Header(
        version=1,
        direction=jmq4.Direction.REQUEST,
        qos=jmq4.QosLevel.REPLICATION,
        request_id=77,
        type=jmq4.CommandType.FETCH_TOPIC_MESSAGE,
        send_time=1,
    )
    ack = jmq4.boolean_ack(request, jmq4.Code.FW_CONNECTION_NOT_EXISTS, "x" * 40000)
    encoded = ack.encode()
    assert encoded[8:10] == b"\x04\x03"
    assert ack.header.request_id == 77
    assert ack.header.send_time > SEND_TIME
    assert len(ack.header.error) == 32767
    assert jmq4.decode_frame(encoded) == ack


def test_header_encoding_limits() -> None:
    header = jmq4.Header(
        version=4,
        direction=jmq4.Direction.REQUEST,
        qos=jmq4.QosLevel.ALL,
        request_id=1,
        type=jmq4.CommandType.HEARTBEAT,
        send_time=0,
    )
    assert jmq4.encode_frame(header, jmq4.HeartbeatRequest())[9] == 0x00  # ALL is sent as 0
    for bad in ({"version": 5}, {"request_id": 2**31}):
        with pytest.raises(jmq4.EncodeError):
            jmq4.encode_frame(replace(header, **bad), jmq4.HeartbeatRequest())
    with pytest.raises(jmq4.EncodeError, match="status"):
        jmq4.boolean_ack(header, jmq4.Code.NSR_REGISTER_ERR_BROKER_NOT_EXIST).encode()
    with pytest.raises(jmq4.EncodeError, match="status"):
        jmq4.boolean_ack(header, 10).encode()


def test_payload_codes_must_be_defined() -> None:
    request = jmq4.decode_frame(by_title("COMMIT_ACK request").data).header
    for code in (999, 10, -1):
        partition = jmq4.PartitionCode(partition=0, code=code)
        payload = jmq4.CommitAckResponse(
            topics=(jmq4.TopicPartitionCodes(topic="t", partitions=(partition,)),)
        )
        with pytest.raises(jmq4.EncodeError, match="not a JMQ4 code"):
            jmq4.encode_frame(jmq4.response_header(request), payload)


# --- count and version-dependent layouts -------------------------------------------------------


def _response(request_type: jmq4.CommandType, version: int) -> jmq4.Header:
    return jmq4.Header(
        version=version,
        direction=jmq4.Direction.RESPONSE,
        qos=jmq4.QosLevel.RECEIVE,
        request_id=1,
        type=jmq4.response_type(request_type),
        send_time=0,
    )


@pytest.mark.parametrize(
    ("request_type", "payload_type"),
    [
        (jmq4.CommandType.COMMIT_ACK, jmq4.CommitAckResponse),
        (jmq4.CommandType.COMMIT_ACK_INDEX, jmq4.CommitAckIndexResponse),
    ],
)
def test_commit_ack_responses_count_topic_entries(
    request_type: jmq4.CommandType, payload_type: type[jmq4.CommitAckResponse]
) -> None:
    partitions = (jmq4.PartitionCode(partition=0), jmq4.PartitionCode(partition=1, code=140))
    payload = payload_type(topics=(jmq4.TopicPartitionCodes(topic="t1", partitions=partitions),))
    encoded = jmq4.encode_frame(_response(request_type, 4), payload)
    assert encoded[26:28] == b"\x00\x01"  # one topic entry, not two (topic, partition) pairs
    assert encoded[32:34] == b"\x00\x02"
    assert jmq4.decode_frame(encoded).payload == payload


def test_fetch_cluster_layout_depends_on_version() -> None:
    payload = jmq4.FetchClusterResponse(
        topics=(jmq4.ClusterTopic(topic="t", code=189, params=(("k", "v"),)),),
        brokers=(jmq4.ClusterBroker(id=1, sys_code=5, permission=1),),
    )
    sizes = {
        v: len(jmq4.encode_frame(_response(jmq4.CommandType.FETCH_CLUSTER, v), payload))
        for v in (1, 2, 3, 4)
    }
    assert sizes[2] - sizes[1] == 8  # broker sysCode + permission
    assert sizes[3] == sizes[2]
    assert sizes[4] - sizes[3] == 2 + 2 + 1 + 2 + 1  # params A{key S2, value S2}
    v1 = jmq4.decode_frame(
        jmq4.encode_frame(_response(jmq4.CommandType.FETCH_CLUSTER, 1), payload)
    ).payload
    assert isinstance(v1, jmq4.FetchClusterResponse)
    assert v1.topics[0].params == ()
    assert (v1.brokers[0].sys_code, v1.brokers[0].permission) == (0, 3)


def test_fetch_index_layout_depends_on_version() -> None:
    entry = jmq4.PartitionIndexResult(partition=0, index=5, left_index=1, right_index=9)
    payload = jmq4.FetchIndexResponse(
        topics=(jmq4.IndexResultTopic(topic="t", partitions=(entry,)),)
    )
    v2 = jmq4.encode_frame(_response(jmq4.CommandType.FETCH_INDEX, 2), payload)
    v3 = jmq4.encode_frame(_response(jmq4.CommandType.FETCH_INDEX, 3), payload)
    assert len(v3) - len(v2) == 16
    assert jmq4.decode_frame(v3).payload == payload
    decoded_v2 = jmq4.decode_frame(v2).payload
    assert isinstance(decoded_v2, jmq4.FetchIndexResponse)
    assert decoded_v2.topics[0].partitions[0].left_index == 0


def test_find_coordinator_without_broker() -> None:
    payload = jmq4.FindCoordinatorResponse(
        entries=(jmq4.CoordinatorEntry(topic="t", broker=None, code=181),)
    )
    encoded = jmq4.encode_frame(_response(jmq4.CommandType.FIND_COORDINATOR, 4), payload)
    assert encoded[26:] == b"\x00\x01" + s2(b"t") + b"\xff\xff\xff\xff" + b"\x00\x00\x00\xb5"
    assert jmq4.decode_frame(encoded).payload == payload
    with pytest.raises(jmq4.EncodeError):
        jmq4.encode_frame(
            _response(jmq4.CommandType.FIND_COORDINATOR, 4),
            jmq4.FindCoordinatorResponse(
                entries=(jmq4.CoordinatorEntry(topic="t", broker=jmq4.BrokerNode(id=-1)),)
            ),
        )
