"""Writing replies, deliveries and tracker pushes (zbus.md §1, §6, §8–§12), byte for byte."""

from __future__ import annotations

import pytest

from brokers.protocols.zbus import (
    REASONS,
    AliasFamily,
    Decoder,
    EncodeError,
    Message,
    RequestLine,
    StatusLine,
    encode_message,
    make_delivery,
    make_reply,
    make_request,
    reason_phrase,
)
from brokers.protocols.zbus.replies import (
    ADMIN_FORBIDDEN,
    MESSAGE_TOO_LARGE,
    command_not_supported,
    mq_forbidden,
    mq_not_found,
    sub_cmd_not_found,
)


def decode(data: bytes) -> Message:
    (message,) = Decoder().feed(data)
    assert isinstance(message, Message)
    return message


def test_produce_ack() -> None:
    reply = make_reply(200, "1700000000000", msgid="m1", mq_reply="sess-1")
    assert encode_message(reply) == (
        b"HTTP/1.1 200 OK\r\n"
        b"msgid: m1\r\n"
        b"mq_reply: sess-1\r\n"
        b"content-length: 13\r\n"
        b"\r\n"
        b"1700000000000"
    )


def test_content_length_zero_is_always_written() -> None:
    assert encode_message(make_reply(200)) == b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n"


@pytest.mark.parametrize(
    ("status", "body", "wire"),
    [
        (
            400,
            command_not_supported("foo"),
            b"HTTP/1.1 400 Bad Request\r\nmsgid: m1\r\nmq_reply: s\r\ncontent-length: 36\r\n\r\n"
            b"Bad format: command(foo) not support",
        ),
        (
            404,
            mq_not_found("MyMQ"),
            b"HTTP/1.1 404 Not Found\r\nmsgid: m1\r\nmq_reply: s\r\ncontent-length: 18\r\n\r\n"
            b"MQ(MyMQ) Not Found",
        ),
        (
            403,
            mq_forbidden("MyMQ", None),
            b"HTTP/1.1 403 Forbidden\r\nmsgid: m1\r\nmq_reply: s\r\ncontent-length: 42\r\n\r\n"
            b"MQ(MyMQ) forbbiden, token(null) mismatched",
        ),
        (
            403,
            ADMIN_FORBIDDEN,
            b"HTTP/1.1 403 Forbidden\r\nmsgid: m1\r\nmq_reply: s\r\ncontent-length: 33\r\n\r\n"
            b"admin forbidden, token mismatched",
        ),
        (
            404,
            sub_cmd_not_found("nope"),
            b"HTTP/1.1 404 Not Found\r\nmsgid: m1\r\nmq_reply: s\r\ncontent-length: 22\r\n\r\n"
            b"sub_cmd=nope Not Found",
        ),
        (
            400,
            MESSAGE_TOO_LARGE,
            b"HTTP/1.1 400 Bad Request\r\nmsgid: m1\r\nmq_reply: s\r\ncontent-length: 29\r\n\r\n"
            b"Bad format: message too large",
        ),
        (
            500,
            "store unavailable",
            b"HTTP/1.1 500 Internal Server Error\r\nmsgid: m1\r\nmq_reply: s\r\n"
            b"content-length: 17\r\n\r\nstore unavailable",
        ),
    ],
)
def test_error_replies(status: int, body: str, wire: bytes) -> None:
    assert encode_message(make_reply(status, body, msgid="m1", mq_reply="s")) == wire


def test_error_texts() -> None:
    assert mq_forbidden("q", "abc") == "MQ(q) forbbiden, token(abc) mismatched"
    assert mq_forbidden("q", "") == "MQ(q) forbbiden, token() mismatched"


def test_reason_phrases() -> None:
    assert REASONS == {
        200: "OK",
        400: "Bad Request",
        403: "Forbidden",
        404: "Not Found",
        500: "Internal Server Error",
    }
    assert reason_phrase(201) == "Created"
    assert reason_phrase(599) == "Unknown Status"


def test_admin_reply_with_content_type() -> None:
    reply = make_reply(200, b"{}", msgid="a1", headers={"content-type": "application/json"})
    assert encode_message(reply) == (
        b"HTTP/1.1 200 OK\r\nmsgid: a1\r\ncontent-type: application/json\r\n"
        b"content-length: 2\r\n\r\n{}"
    )


def test_utf8_body_from_text() -> None:
    reply = make_reply(200, "ZBUS服务总线")
    assert encode_message(reply).endswith(b"content-length: 16\r\n\r\n" + "ZBUS服务总线".encode())


def test_alias_families_are_written_after_canonical_names() -> None:
    reply = make_reply(200, msgid="m1", mq_reply="s", headers={"msgid_raw": "r"})
    assert encode_message(reply, aliases=AliasFamily.ID) == (
        b"HTTP/1.1 200 OK\r\nmsgid: m1\r\nid: m1\r\nmq_reply: s\r\nmsgid_raw: r\r\nrawid: r\r\n"
        b"content-length: 0\r\n\r\n"
    )
    assert encode_message(reply, aliases=AliasFamily.HYPHEN) == (
        b"HTTP/1.1 200 OK\r\nmsgid: m1\r\nmq_reply: s\r\nmq-reply: s\r\nmsgid_raw: r\r\n"
        b"msgid-raw: r\r\ncontent-length: 0\r\n\r\n"
    )


def test_aliases_decode_back_to_canonical() -> None:
    reply = make_reply(200, msgid="m1", mq_reply="s", headers={"msgid_raw": "r"})
    wire = encode_message(reply, aliases=AliasFamily.ID | AliasFamily.HYPHEN)
    decoded = decode(wire)
    assert dict(decoded.headers) == dict(reply.headers)


STORED = decode(
    b"GET / HTTP/1.1\r\ncmd: produce\r\nmq: MyMQ\r\nmsgid: p1\r\ntoken: secret\r\n"
    b"remote-addr: 10.0.0.2:40000\r\nbroker: 10.0.0.1:15555\r\nmq_reply: sess-p\r\n"
    b"content-length: 2\r\n\r\nhi"
)


def test_queue_delivery() -> None:
    delivered = make_delivery(STORED, msgid="c1")
    assert encode_message(delivered) == (
        b"HTTP/1.1 200 OK\r\n"
        b"cmd: produce\r\n"
        b"mq: MyMQ\r\n"
        b"msgid: c1\r\n"
        b"remote-addr: 10.0.0.2:40000\r\n"
        b"broker: 10.0.0.1:15555\r\n"
        b"mq_reply: sess-p\r\n"
        b"msgid_raw: p1\r\n"
        b"content-length: 2\r\n"
        b"\r\n"
        b"hi"
    )


def test_redelivery_is_marked() -> None:
    delivered = make_delivery(STORED, msgid="c2", redelivered=True)
    assert delivered.headers["redelivered"] == "1"
    assert delivered.msgid == "c2"


def test_delivery_status_from_reply_code_then_own_status() -> None:
    with_code = STORED.with_headers({"reply_code": "500"})
    assert make_delivery(with_code, msgid="c").start == StatusLine(500, "Internal Server Error")
    worker = decode(b"HTTP/1.1 404 Not Found\r\ncmd: produce\r\nmsgid: r1\r\n\r\n")
    assert make_delivery(worker, msgid="r1").start == StatusLine(404, "Not Found")
    both = worker.with_headers({"reply_code": "201"})
    assert make_delivery(both, msgid="r1").status == 201


def test_pubsub_delivery_forces_status_200() -> None:
    worker = decode(b"HTTP/1.1 404 Not Found\r\ncmd: produce\r\nmsgid: p9\r\ntopic: t\r\n\r\n")
    delivered = make_delivery(worker, msgid="c9", status=200)
    assert delivered.start == StatusLine(200, "OK")
    assert (delivered.msgid, delivered.msgid_raw) == ("c9", "p9")


def test_delivery_without_producer_id_drops_msgid_raw() -> None:
    stored = Message(headers={"cmd": "produce", "msgid_raw": "old"})
    assert "msgid_raw" not in make_delivery(stored, msgid="c").headers


def test_rpc_request_delivered_to_worker_with_hyphen_aliases() -> None:
    stored = decode(
        b"GET / HTTP/1.1\r\ncmd: request\r\nmq: svc\r\nid: r1\r\nmq-reply: rq\r\nack: 0\r\n\r\n"
    )
    wire = encode_message(make_delivery(stored, msgid="w1"), aliases=AliasFamily.HYPHEN)
    assert wire == (
        b"HTTP/1.1 200 OK\r\ncmd: request\r\nmq: svc\r\nmsgid: w1\r\nmq_reply: rq\r\n"
        b"mq-reply: rq\r\nack: 0\r\nmsgid_raw: r1\r\nmsgid-raw: r1\r\ncontent-length: 0\r\n\r\n"
    )


def test_track_pub_is_request_shaped() -> None:
    push = make_request({"cmd": "track_pub"}, '{"brokerTable":{},"mqTable":{}}')
    assert encode_message(push) == (
        b"GET / HTTP/1.1\r\ncmd: track_pub\r\ncontent-length: 31\r\n\r\n"
        b'{"brokerTable":{},"mqTable":{}}'
    )


def test_encoding_ignores_a_content_length_header() -> None:
    message = Message(start=StatusLine(), headers={"content-length": "99"}, body=b"ab")
    assert encode_message(message) == b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nab"


@pytest.mark.parametrize(
    "message",
    [
        Message(headers={"x": "a\r\nb"}),
        Message(headers={"x": "a\x00"}),
        Message(headers={"a:b": "v"}),
        Message(headers={"": "v"}),
        Message(start=StatusLine(status=42)),
        Message(start=StatusLine(reason="a\nb")),
        Message(start=RequestLine(method="G T")),
        Message(start=RequestLine(uri="/a b")),
        Message(start=RequestLine(uri="")),
    ],
)
def test_unwritable_messages(message: Message) -> None:
    with pytest.raises(EncodeError):
        encode_message(message)
