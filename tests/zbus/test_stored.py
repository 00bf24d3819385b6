"""zbus messages ↔ engine records: every header is a property of the record (the msgid
included, which is what a trace searches) and comes back to a zbus consumer as sent."""

from __future__ import annotations

from brokers.engine import decode_record, encode_record
from brokers.protocols.zbus import Message, RequestLine, StatusLine
from brokers.servers.zbus.stored import MARK, STATUS, from_record, to_engine


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
