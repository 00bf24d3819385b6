"""WireMessages (one walk over a produce entry's messages) and ProducedItems (packed items).

The walk must frame messages exactly as the reference reader does: same messages, same end,
and the same DecodeError for the same malformed bytes.
"""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from brokers.protocols import jmq4
from brokers.protocols.jmq4.wire import batch_item_count, scan_messages
from tests.protocols.jmq4.strategies import batch_items
from tests.protocols.jmq4.strategies import messages as message_strategy

message_lists = st.lists(message_strategy, max_size=6)


def reference(data: bytes, count: int) -> tuple[tuple[jmq4.BrokerMessage, ...], int] | str:
    """The full decoder's verdict: (messages, end) or its DecodeError text."""
    r = jmq4.Reader(data)
    try:
        return tuple(jmq4.BrokerMessage.read(r) for _ in range(count)), r.position
    except jmq4.DecodeError as exc:
        return str(exc)


def walked(data: bytes, count: int) -> tuple[tuple[jmq4.BrokerMessage, ...], int] | str:
    try:
        wire, end = scan_messages(data, 0, len(data), count)
    except jmq4.DecodeError as exc:
        return str(exc)
    return tuple(wire), end


def request_header(type_: int) -> jmq4.Header:
    return jmq4.Header(
        version=jmq4.CURRENT_VERSION,
        direction=jmq4.Direction.REQUEST,
        qos=jmq4.QosLevel.RECEIVE,
        request_id=7,
        type=type_,
        send_time=1,
    )


def produce_frame(msgs: tuple[jmq4.BrokerMessage, ...]) -> jmq4.Frame:
    header = request_header(jmq4.CommandType.PRODUCE_MESSAGE)
    entry = jmq4.ProduceTopic(topic="t", messages=msgs)
    return jmq4.Frame(header, jmq4.ProduceMessageRequest(topics=(entry,), app="a"))


@given(msgs=message_lists)
def test_decoded_messages_equal_the_tuple_and_reencode_to_the_same_bytes(msgs):
    msgs = tuple(msgs)
    data = produce_frame(msgs).encode()
    decoded = jmq4.decode_frame(data)
    wire = decoded.payload.topics[0].messages
    assert isinstance(wire, jmq4.WireMessages)
    assert wire == msgs and msgs == wire and len(wire) == len(msgs)
    assert decoded == produce_frame(msgs)
    assert decoded.encode() == data
    assert hash(wire) == hash(msgs)
    assert [m.raw for m in wire] == [m.to_bytes() for m in msgs]
    assert wire.partitions == tuple(m.partition for m in msgs)
    assert wire.send_times == tuple(m.send_time for m in msgs)
    assert wire.sys_codes == tuple(m.sys_code for m in msgs)
    assert wire.max_body_size == max((len(m.body) for m in msgs), default=0)
    assert jmq4.WireMessages.from_messages(msgs) == wire


@given(msgs=message_lists.filter(bool), index=st.integers(-8, 8))
def test_sequence_protocol(msgs, index):
    wire = jmq4.WireMessages.from_messages(msgs)
    if -len(msgs) <= index < len(msgs):
        assert wire[index] == msgs[index]
        assert wire.raw(index % len(msgs)) == msgs[index].to_bytes()
    else:
        with pytest.raises(IndexError):
            wire[index]
    assert wire[1:3] == tuple(msgs[1:3])
    assert wire[::-1] == tuple(reversed(msgs))
    assert list(reversed(wire)) == list(reversed(msgs))
    assert msgs[0] in wire and wire.index(msgs[0]) == msgs.index(msgs[0])
    assert wire != list(msgs)  # like a tuple, never equal to a list
    with pytest.raises(AttributeError):
        wire.data = b""  # type: ignore[misc]


def mutated(rng: random.Random, data: bytes, most: int = 3) -> bytes:
    """``data`` with up to ``most`` random byte changes, cuts, insertions or deletions."""
    out = bytearray(data)
    for _ in range(rng.randint(0, most)):
        if not out:
            break
        pos = rng.randrange(len(out))
        op = rng.randrange(4)
        if op == 0:
            out[pos] = rng.choice((0x00, 0x01, 0x7F, 0x80, 0xFF, 0xC3, rng.randrange(256)))
        elif op == 1:
            del out[pos:]
        elif op == 2:
            out[pos:pos] = rng.randbytes(rng.randint(1, 4))
        else:
            del out[pos : pos + rng.randint(1, 4)]
    return bytes(out)


@settings(max_examples=600)
@given(msgs=message_lists, seed=st.integers(0, 2**32 - 1), extra=st.integers(-1, 2))
def test_malformed_messages_fail_like_the_full_decoder(msgs, seed, extra):
    """Mutated, cut or padded message runs: same messages and end, or the same error."""
    data = mutated(random.Random(seed), b"".join(m.to_bytes() for m in msgs), most=4)
    count = max(0, len(msgs) + extra)
    assert walked(data, count) == reference(data, count)


def test_invalid_utf8_and_negative_lengths_give_the_reference_errors():
    good = jmq4.BrokerMessage(body=b"b", business_id="id", attributes="k=v", app="app")
    raw = good.to_bytes()
    body_end = 65 + 1
    cases = {
        "bad businessId": raw[: body_end + 1] + b"\xff\xfe" + raw[body_end + 3 :],
        "negative body": raw[:61] + b"\xff\xff\xff\xff" + raw[65:],
        "negative S1": raw[:body_end] + b"\x80" + raw[body_end + 1 :],
        "S1 -1 then nothing": raw[:body_end] + b"\xff",
        "S1 -1": raw[:body_end] + b"\xff" + raw[body_end + 1 :],
        "cut": raw[:-1],
    }
    for name, data in cases.items():
        expected = reference(data, 1)
        assert isinstance(expected, str), name
        assert walked(data, 1) == expected, name


def test_repeated_tails_are_still_checked_per_message():
    """A message whose tail merely starts like the previous one is walked, not trusted."""
    first = jmq4.BrokerMessage(body=b"x", app="app").to_bytes()
    second = jmq4.BrokerMessage(body=b"y", app="app").to_bytes()[:-1]  # app cut short
    data = first + second
    assert walked(data, 2) == reference(data, 2)
    assert isinstance(walked(data, 2), str)


# --- ProducedItems ---------------------------------------------------------------------


@given(
    partition=st.integers(-(2**15), 2**15 - 1),
    rows=st.lists(st.tuples(st.integers(-(2**63), 2**63 - 1), st.integers(-(2**63), 2**63 - 1))),
)
def test_produced_items_encode_like_the_tuple(partition, rows):
    indexes = tuple(i for i, _ in rows)
    times = tuple(t for _, t in rows)
    packed = jmq4.ProducedItems(partition, indexes, times)
    plain = tuple(jmq4.ProducedItem(partition=partition, index=i, start_time=t) for i, t in rows)
    assert packed == plain and plain == packed and hash(packed) == hash(plain)
    assert list(packed) == list(plain) and packed[:2] == plain[:2]
    header = request_header(jmq4.CommandType.PRODUCE_MESSAGE)

    def response(items):
        result = jmq4.ProduceTopicResult(topic="t", items=items)
        return jmq4.response_frame(header, jmq4.ProduceMessageResponse(topics=(result,)))

    data = response(packed).encode()
    assert data == response(plain).encode()
    assert jmq4.decode_frame(data).payload.topics[0].items == plain


def test_produced_items_refuse_unencodable_values():
    header = request_header(jmq4.CommandType.PRODUCE_MESSAGE)
    for items in (
        jmq4.ProducedItems(2**15, (0,), (0,)),
        (jmq4.ProducedItem(partition=0, index=2**63, start_time=0),),
    ):
        result = jmq4.ProduceTopicResult(topic="t", items=items)
        frame = jmq4.response_frame(header, jmq4.ProduceMessageResponse(topics=(result,)))
        with pytest.raises(jmq4.EncodeError):
            frame.encode()
    with pytest.raises(ValueError):
        jmq4.ProducedItems(0, (1, 2), (1,))


def test_constructed_messages_still_encode_through_the_tuple_path():
    msg = replace(jmq4.BrokerMessage(body=b"x", app="a"), size=None)
    data = produce_frame((msg,)).encode()
    assert jmq4.decode_frame(data).payload.topics[0].messages == (
        jmq4.BrokerMessage.from_bytes(msg.to_bytes()),
    )


# --- batch bodies ----------------------------------------------------------------------


@settings(max_examples=500)
@given(items=st.lists(batch_items, max_size=5), seed=st.integers(0, 2**32 - 1))
def test_batch_item_count_agrees_with_decode_batch(items, seed):
    body = mutated(random.Random(seed), jmq4.encode_batch(items))
    try:
        expected: int | None = len(jmq4.decode_batch(body))
    except jmq4.DecodeError:
        expected = None
    padded = b"\x00\x00\x00\x20" + body + b"\x00\x00\x00\x0e"  # bytes around must not count
    assert batch_item_count(padded, 4, 4 + len(body)) == expected


@given(items=st.lists(batch_items, min_size=1, max_size=4), flag=st.integers(-1, 5))
def test_batch_rejected_matches_validate_message(items, flag):
    sys_code = jmq4.SysCode(batch=True).encode()
    for compressed in (False, True):
        code = sys_code | jmq4.SYS_COMPRESSED if compressed else sys_code
        msg = jmq4.BrokerMessage(body=jmq4.encode_batch(items), sys_code=code, flag=flag)
        msg = replace(msg, size=msg.encoded_size)
        wire = jmq4.WireMessages.from_messages((jmq4.BrokerMessage(body=b"x"), msg))
        assert not wire.batch_rejected(0)
        assert wire.batch_rejected(1) == (jmq4.validate_message(msg) is not None)


def test_decoded_items_are_packed_when_they_share_a_partition():
    header = request_header(jmq4.CommandType.PRODUCE_MESSAGE)
    same = tuple(jmq4.ProducedItem(partition=3, index=i, start_time=9) for i in range(3))
    mixed = (*same, jmq4.ProducedItem(partition=4, index=0, start_time=1))
    for items, kind in ((same, jmq4.ProducedItems), (mixed, tuple), ((), tuple)):
        result = jmq4.ProduceTopicResult(topic="t", items=items)
        data = jmq4.response_frame(header, jmq4.ProduceMessageResponse(topics=(result,))).encode()
        decoded = jmq4.decode_frame(data).payload.topics[0].items
        assert type(decoded) is kind and decoded == items
        assert jmq4.decode_frame(data).encode() == data
