"""zbus messages ↔ engine records: headers travel whole in the extension, the producer's
msgid is also the record's ``msgid`` property (what a trace searches)."""

from __future__ import annotations

from brokers.engine import decode_record, encode_record
from brokers.protocols.zbus import Message, RequestLine
from brokers.servers.zbus.stored import MAX_ID_PROPERTY, from_record, to_engine


def stored(message: Message) -> bytes:
    return encode_record(to_engine(message), app="a", now_ms=1_700_000_000_000)[0]


def test_msgid_is_a_property_and_the_headers_round_trip():
    sent = Message(RequestLine(), {"cmd": "produce", "topic": "q", "msgid": "m-1"}, b"hi")
    record = stored(sent)
    assert decode_record(record).attributes == {"msgid": "m-1"}
    back = from_record(record)  # a zbus consumer still gets exactly the headers it sent
    assert dict(back.headers) == dict(sent.headers) and back.body == b"hi"


def test_no_msgid_or_an_overlong_one_adds_no_property():
    bare = Message(RequestLine(), {"cmd": "produce", "topic": "q"}, b"x")
    assert decode_record(stored(bare)).attributes == {}
    long_id = "i" * (MAX_ID_PROPERTY + 1)
    huge = Message(RequestLine(), {"cmd": "produce", "topic": "q", "msgid": long_id}, b"x")
    record = stored(huge)
    assert decode_record(record).attributes == {}
    assert from_record(record).headers["msgid"] == long_id
