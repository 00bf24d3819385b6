"""zbus messages ↔ engine records: every header is a property of the record (the msgid
included, which is what a trace searches) and comes back to a zbus consumer as sent."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from brokers.engine import Message as EngineMessage
from brokers.engine import decode_record, encode_record, record_parts
from brokers.protocols.zbus import (
    AliasFamily,
    Decoder,
    EncodeError,
    Message,
    RequestLine,
    StatusLine,
    encode_message,
    make_delivery,
)
from brokers.servers.zbus.stored import (
    MARK,
    STATUS,
    _header_block,
    delivery_bytes,
    from_record,
    to_engine,
    topic_of,
)


def stored(message: Message) -> bytes:
    return encode_record(to_engine(message), app="a", now_ms=1_700_000_000_000)[0]


def test_headers_are_properties_and_round_trip():
    sent = Message(RequestLine(), {"cmd": "produce", "topic": "q", "msgid": "m-1"}, b"hi")
    record = decode_record(stored(sent))
    assert record.attributes == {"cmd": "produce", "topic": "q", "msgid": "m-1"}
    assert record.extension == MARK  # the message browser names zbus from it
    back = from_record(stored(sent))  # a zbus consumer gets exactly the headers it sent
    assert dict(back.headers) == dict(sent.headers) and back.body == b"hi"


def test_a_long_msgid_and_a_reply_status_survive():
    long_id = "i" * 300
    reply = Message(StatusLine(404, "Not Found"), {"msgid": long_id}, b"gone")
    record = stored(reply)
    assert decode_record(record).attributes[STATUS] == "404"
    back = from_record(record)
    assert back.headers["msgid"] == long_id and back.status == 404


# ---------------------------------------------------------------- one-pass delivery

_KEYS = st.sampled_from(
    ["cmd", "mq", "topic", "Topic", "msgid", "MsgId", "msgid_raw", "mq_reply", "token",
     "redelivered", "content-length", "reply_code", "messageId", ":status", ":content-type",
     "x", "X", "a:b", "new\nline", ""]
)  # fmt: skip
_COMMON_KEYS = st.sampled_from(
    ["cmd", "mq", "topic", "Topic", "mq_reply", "token", "content-length", "messageId",
     ":content-type", "x", "X", "a:b", "remote-addr"]
)  # fmt: skip
"""Keys a record read line by line may hold (with a ``msgid``): no status or id of its own."""
_COMMON_VALUES = st.one_of(
    st.sampled_from(["", "1", "m-1", "host:port", "a=b", "é", " lead", "tab\there", "\x01"]),
    st.text(
        st.characters(min_codepoint=32, max_codepoint=126, exclude_characters="\\"), max_size=12
    ),
)
"""Values such a record holds: printable ASCII (the properties text escapes the rest),
with now and then one it does not (a blank first, a tab, a non-ASCII letter)."""
_VALUES = st.one_of(
    st.sampled_from(["", "1", "200", "404", "99", "²00", "m-1", "host:port", "a\nb", "é"]),
    st.text(max_size=12),
)


@settings(max_examples=400, deadline=None)
@given(
    attributes=st.one_of(
        st.dictionaries(_KEYS, _VALUES, max_size=8),
        st.dictionaries(_COMMON_KEYS, _COMMON_VALUES, max_size=8),
    ),
    produced_msgid=st.one_of(st.none(), _VALUES, _COMMON_VALUES),
    business_id=st.sampled_from(["", "biz-1", "bad\nid"]),
    body=st.binary(max_size=16),
    msgid=st.one_of(st.none(), st.sampled_from(["c-1", "x"])),
    status=st.sampled_from([None, 200]),
    redelivered=st.booleans(),
    aliases=st.sampled_from([AliasFamily.NONE, AliasFamily.ID, AliasFamily.HYPHEN, AliasFamily(3)]),
)
def test_one_pass_delivery_writes_what_the_message_path_writes(
    attributes, produced_msgid, business_id, body, msgid, status, redelivered, aliases
):
    """``delivery_bytes`` (run per delivered message) writes the bytes of the message
    path it short-cuts — properties → ``Message`` → ``make_delivery`` → encoder — for
    any properties another protocol may have stored, and never fails where that path
    writes; read from the attribute lines (a zbus producer's ``msgid``, most often
    there) or through the headers' dict, with the line cache cold or warm."""
    if produced_msgid is not None:
        attributes = {**attributes, "msgid": produced_msgid}
    record = encode_record(
        EngineMessage(body, business_id=business_id, attributes=attributes),
        app="a",
        now_ms=1_700_000_000_000,
    )[0]
    try:
        expected = encode_message(
            make_delivery(from_record(record), msgid=msgid, status=status, redelivered=redelivered),
            aliases=aliases,
        )
    except EncodeError:
        expected = None
    got = delivery_bytes(
        record, msgid=msgid, status=status, redelivered=redelivered, aliases=aliases
    )
    assert expected is not None  # every stored message can be written to a zbus consumer
    assert got == expected
    again = delivery_bytes(
        record, msgid=msgid, status=status, redelivered=redelivered, aliases=aliases
    )
    assert again == expected
    assert topic_of(record) == from_record(record).topic  # what a pub/sub MQ matches
    # and a client reads it back: status, the consume's msgid, the producer's as msgid_raw
    (delivered,) = Decoder().feed(got)
    assert isinstance(delivered, Message) and delivered.body == body
    assert delivered.msgid == msgid


def test_a_zbus_producers_record_is_framed_from_its_attribute_lines():
    """What a zbus producer stores (its headers and the broker's stamps, a new msgid on
    every message) is framed from its attribute text, and writes what the message path
    does — the next message of the producer (another msgid) from the cached blocks."""
    headers = {
        "cmd": "produce",
        "mq": "orders",
        "msgid": "5f0e9f0c-8d0c-4b7e-a8b1-0c2f0f9d3a11",
        "remote-addr": "127.0.0.1:40000",
        "broker": "127.0.0.1:15555",
        "mq_reply": "d1b7a0c6-5c1e-4a83-9c59-5b1f0b8f4e0a",
    }
    record = encode_record(EngineMessage(b"body", attributes=headers), app="a", now_ms=1)[0]
    for aliases in (AliasFamily.NONE, AliasFamily.ID, AliasFamily.HYPHEN):
        block = _header_block(record_parts(record).attribute_bytes, aliases)
        assert block is not None and block[2] == headers["msgid"]
        expected = encode_message(make_delivery(from_record(record), msgid="c"), aliases=aliases)
        assert delivery_bytes(record, msgid="c", aliases=aliases) == expected
        nxt = encode_record(
            EngineMessage(b"next", attributes={**headers, "msgid": "m-2"}), app="a", now_ms=1
        )[0]
        expected = encode_message(make_delivery(from_record(nxt), msgid="d"), aliases=aliases)
        assert delivery_bytes(nxt, msgid="d", aliases=aliases) == expected


def test_a_status_property_other_protocols_may_write_never_breaks_a_delivery():
    """``:status`` written by a JMQ4 or HTTP-MQ producer may be anything; only a
    three-digit status becomes the delivery's."""
    for value, status in (("²00", 200), ("5", 200), ("1000", 200), ("503", 503)):
        record = encode_record(EngineMessage(b"b", attributes={STATUS: value}), app="a", now_ms=1)[
            0
        ]
        (delivered,) = Decoder().feed(delivery_bytes(record, msgid="m"))
        assert delivered.status == status, value
