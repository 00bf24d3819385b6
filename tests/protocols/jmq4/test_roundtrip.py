"""Property tests: every frame type, each header version, and the message-level encodings
survive encode → decode → encode unchanged."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from brokers.protocols import jmq4
from tests.protocols.jmq4.strategies import (
    PAYLOADS,
    attribute_maps,
    batch_items,
    frames,
    messages,
)

PAYLOAD_TYPES = sorted(PAYLOADS, key=lambda cls: cls.TYPE)


def test_every_command_has_a_payload_class() -> None:
    """Requests 1–8, 10, 20, 21, 30–33, 35, 50–54 and their typed responses plus BooleanAck."""
    requests = {1, 2, 3, 4, 5, 6, 7, 8, 10, 20, 21, 30, 31, 32, 33, 35, 50, 51, 52, 53, 54}
    assert set(jmq4.REQUEST_PAYLOADS) == requests
    typed = {-t for t in requests if jmq4.response_type(jmq4.CommandType(t)) != -128}
    assert set(jmq4.RESPONSE_PAYLOADS) == typed | {-128}
    assert set(PAYLOADS) == {*jmq4.REQUEST_PAYLOADS.values(), *jmq4.RESPONSE_PAYLOADS.values()}


@pytest.mark.parametrize("payload_type", PAYLOAD_TYPES, ids=lambda cls: cls.__name__)
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_frame_round_trip(payload_type: type[jmq4.Payload], data: st.DataObject) -> None:
    frame = data.draw(frames(payload_type))
    encoded = frame.encode()
    assert int.from_bytes(encoded[:4], "big") == len(encoded)
    decoded = jmq4.decode_frame(encoded)
    assert decoded == frame
    assert decoded.encode() == encoded


@pytest.mark.parametrize("version", [1, 2, 3, 4])
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_every_version_round_trips(version: int, data: st.DataObject) -> None:
    frame = data.draw(frames())
    frame = replace(frame, header=replace(frame.header, version=version))
    encoded = frame.encode()
    decoded = jmq4.decode_frame(encoded)
    assert decoded.encode() == encoded


@settings(max_examples=200, deadline=None)
@given(message=messages)
def test_message_round_trip(message: jmq4.BrokerMessage) -> None:
    encoded = message.to_bytes()
    assert len(encoded) == message.size == message.encoded_size
    decoded = jmq4.BrokerMessage.from_bytes(encoded)
    assert decoded == message
    assert decoded.raw == encoded
    assert replace(decoded, size=None).to_bytes() == encoded
    assert jmq4.validate_message(decoded) in (None, jmq4.Code.CN_PARAM_ERROR)


@settings(max_examples=200, deadline=None)
@given(items=st.lists(batch_items, max_size=5).map(tuple))
def test_batch_round_trip(items: tuple[jmq4.BatchItem, ...]) -> None:
    body = jmq4.encode_batch(items)
    assert jmq4.decode_batch(body) == items
    assert jmq4.validate_batch(body, len(items)) == (None if items else jmq4.Code.CN_PARAM_ERROR)


@settings(max_examples=300, deadline=None)
@given(attributes=attribute_maps | st.dictionaries(st.text(), st.text(), max_size=3))
def test_attributes_round_trip(attributes: dict[str, str]) -> None:
    text = jmq4.encode_attributes(attributes)
    assert not text.endswith("\n")
    assert all(" " < ch <= "~" or ch in "\n " for ch in text)
    assert jmq4.decode_attributes(text) == attributes


@settings(max_examples=200, deadline=None)
@given(
    sys_code=st.builds(
        jmq4.SysCode,
        compressed=st.booleans(),
        ordered=st.booleans(),
        source=st.sampled_from(list(jmq4.Source)),
        compression=st.sampled_from(list(jmq4.CompressionType)),
        short_address=st.booleans(),
        version=st.integers(1, 15),
        batch=st.booleans(),
    )
)
def test_sys_code_round_trip(sys_code: jmq4.SysCode) -> None:
    if not sys_code.compressed:
        sys_code = replace(sys_code, compression=jmq4.CompressionType.NONE)
    value = sys_code.encode()
    assert -(2**15) <= value < 2**15
    assert value & 0xE000 == 0
    assert jmq4.SysCode.decode(value) == sys_code
