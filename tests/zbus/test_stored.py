"""zbus messages ↔ engine records: every header is a property of the record (the msgid
included, which is what a trace searches) and comes back to a zbus consumer as sent."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from brokers.engine import Message as EngineMessage
from brokers.engine import decode_record, encode_record
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
from brokers.servers.zbus.stored import MARK, STATUS, delivery_bytes, from_record, to_engine


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
    ["cmd", "mq", "msgid", "MsgId", "msgid_raw", "mq_reply", "token", "redelivered",
     "content-length", "reply_code", "messageId", ":status", ":content-type", "x", "X",
     "a:b", "new\nline", ""]
)  # fmt: skip
_VALUES = st.one_of(
    st.sampled_from(["", "1", "200", "404", "99", "²00", "m-1", "host:port", "a\nb", "é"]),
    st.text(max_size=12),
)


@settings(max_examples=400, deadline=None)
@given(
    attributes=st.dictionaries(_KEYS, _VALUES, max_size=8),
    business_id=st.sampled_from(["", "biz-1", "bad\nid"]),
    body=st.binary(max_size=16),
    msgid=st.one_of(st.none(), st.sampled_from(["c-1", "x"])),
    status=st.sampled_from([None, 200]),
    redelivered=st.booleans(),
    aliases=st.sampled_from([AliasFamily.NONE, AliasFamily.ID, AliasFamily.HYPHEN, AliasFamily(3)]),
)
def test_one_pass_delivery_writes_what_the_message_path_writes(
    attributes, business_id, body, msgid, status, redelivered, aliases
):
    """``delivery_bytes`` (run per delivered message) writes the bytes of the message
    path it short-cuts — properties → ``Message`` → ``make_delivery`` → encoder — for
    any properties another protocol may have stored, and never fails where that path
    writes."""
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
    # and a client reads it back: status, the consume's msgid, the producer's as msgid_raw
    (delivered,) = Decoder().feed(got)
    assert isinstance(delivered, Message) and delivered.body == body
    assert delivered.msgid == msgid


def test_a_status_property_other_protocols_may_write_never_breaks_a_delivery():
    """``:status`` written by a JMQ4 or HTTP-MQ producer may be anything; only a
    three-digit status becomes the delivery's."""
    for value, status in (("²00", 200), ("5", 200), ("1000", 200), ("503", 503)):
        record = encode_record(EngineMessage(b"b", attributes={STATUS: value}), app="a", now_ms=1)[
            0
        ]
        (delivered,) = Decoder().feed(delivery_bytes(record, msgid="m"))
        assert delivered.status == status, value
