"""Record codec: JMQ4 layout, properties attributes, batch bodies (property-based)."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from brokers.engine import (
    BatchItem,
    InvalidMessage,
    Message,
    MessageTooLarge,
    decode_attributes,
    decode_batch_body,
    decode_record,
    encode_attributes,
    encode_batch_body,
    encode_record,
)
from brokers.engine.record import _check_wire_record, check_record, restamp_record

text = st.text(st.characters(exclude_categories=("Cs",)), max_size=20)


@given(st.dictionaries(text.filter(bool), text, max_size=5))
def test_attributes_round_trip(attrs):
    assert decode_attributes(encode_attributes(attrs)) == attrs


def test_attribute_escaping_and_java_syntax():
    assert encode_attributes({"a b": " x=y", "k": "é\t"}) == b"a\\ b=\\ x\\=y\nk=\\u00E9\\t"
    text = b"# comment\n! other\n  key1 = value1\nkey2:value2\nkey3 value3\nlong = a\\\n    b\n"
    assert decode_attributes(text) == {
        "key1": "value1",
        "key2": "value2",
        "key3": "value3",
        "long": "ab",
    }
    assert decode_attributes(b"") == {}


def test_batch_vector_from_the_spec():
    body = encode_batch_body(
        [BatchItem(b"a", business_id="x"), BatchItem(b"bc", attributes={"k": "v"})]
    )
    assert (
        body.hex()
        == "00000010000000000000016101780000" + "0000001300000000000002626300" + "00036b3d76"
    )
    items = decode_batch_body(body, 2)
    assert [(i.body, i.business_id, i.attributes) for i in items] == [
        (b"a", "x", {}),
        (b"bc", "", {"k": "v"}),
    ]
    with pytest.raises(InvalidMessage):
        decode_batch_body(body, 3)
    with pytest.raises(InvalidMessage):
        decode_batch_body(body[:-1])


@given(
    body=st.binary(max_size=200),
    bid=st.text(max_size=30).filter(lambda s: len(s.encode()) <= 100),
    prio=st.integers(-128, 127),
    send=st.integers(1, 2**41),
    attrs=st.dictionaries(text.filter(bool), text, max_size=3),
    ext=st.binary(max_size=20),
)
def test_record_round_trip(body, bid, prio, send, attrs, ext):
    raw, count = encode_record(
        Message(
            body, business_id=bid, attributes=attrs, priority=prio, send_time_ms=send, extension=ext
        ),
        app="app",
        partition=3,
        now_ms=send + 5,
        client_address="10.0.0.2:443",
    )
    assert count == 1 and struct.unpack(">i", raw[:4])[0] == len(raw)
    msg = decode_record(raw)
    assert (msg.body, msg.business_id, msg.priority, msg.send_time_ms) == (body, bid, prio, send)
    assert (msg.attributes, msg.extension, msg.app, msg.partition) == (attrs, ext, "app", 3)
    assert msg.store_time_ms == send + 5 and msg.client_address == "10.0.0.2:443"
    assert check_record(raw).size == len(raw)


def test_layout_offsets():
    raw, _ = encode_record(Message(b"hi", send_time_ms=1000), app="ap", partition=7, now_ms=1010)
    assert len(raw) == 73 + 2 + 2
    assert raw[4:6] == b"\x00\x07" and raw[18:20] == b"\x12\x34"
    assert struct.unpack(">h", raw[20:22])[0] == 0x018C  # Java client default + IPv4 bit
    assert struct.unpack(">i", raw[47:51])[0] == 10


def test_invalid_records_are_rejected():
    raw, _ = encode_record(Message(b"hi"), app="ap", now_ms=1)
    with pytest.raises(InvalidMessage):
        check_record(raw[:-1])
    with pytest.raises(InvalidMessage):
        check_record(raw[:4] + b"\x00" + raw[5:] + b"x")
    bad_sys = bytearray(raw)
    bad_sys[20:22] = struct.pack(">h", 0x2000)
    with pytest.raises(InvalidMessage):
        check_record(bytes(bad_sys))
    bad_magic = bytearray(raw)
    bad_magic[18:20] = b"\x00\x00"
    with pytest.raises(InvalidMessage):
        decode_record(bytes(bad_magic))
    batch = bytearray(raw)
    batch[20:22] = struct.pack(">h", 0x118C)  # batch bit, flag 0, body not a batch
    with pytest.raises(InvalidMessage):
        restamp_record(bytes(batch), partition=0, now_ms=5)


def _verdict(check, raw: bytes):
    try:
        return check(raw)
    except (InvalidMessage, MessageTooLarge) as exc:
        return type(exc)


@given(
    body=st.binary(max_size=60),
    bid=st.text(max_size=120),
    sys_code=st.sampled_from([0x010C, 0x018C, 0x110C, 0x1000, 0x1001, 0x2000, -1]),
    flag=st.integers(-2, 3),
    cut=st.integers(0, 400),
    flip=st.tuples(st.integers(0, 400), st.integers(0, 255)),
)
def test_fast_wire_check_agrees_with_full_check(body, bid, sys_code, flag, cut, flip):
    """restamp_record's fast validation accepts and rejects exactly what check_record does."""
    raw, _ = encode_record(Message(body), app="ap", partition=1, now_ms=7)
    bid_raw = bid.encode()[:127]
    bid_raw = bid_raw.decode("utf-8", "ignore").encode()
    head = bytearray(raw[: 65 + len(body)])
    tail = raw[65 + len(body) + 1 :]
    rec = bytearray(head + bytes([len(bid_raw)]) + bid_raw + tail)
    struct.pack_into(">i", rec, 0, len(rec))
    struct.pack_into(">h", rec, 20, sys_code)
    struct.pack_into(">h", rec, 59, flag)
    if flip[0] < len(rec):
        rec[flip[0]] = flip[1]
    data = bytes(rec[: len(rec) - cut % 3])
    full = _verdict(lambda r: check_record(r, max_body=40), data)
    fast = _verdict(lambda r: _check_wire_record(r, 40), data)
    if isinstance(full, type):
        assert fast is full
    else:
        assert fast == (full.sys_code, full.send_time_ms, full.count)
