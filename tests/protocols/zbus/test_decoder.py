"""Framing (zbus.md §1): start lines, headers, bodies, incremental feeding, limits, errors."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from brokers.protocols.zbus import (
    BadContentLength,
    BodyTooLarge,
    Decoder,
    DecoderClosedError,
    HeadTooLarge,
    MalformedHeader,
    MalformedStartLine,
    Message,
    RequestLine,
    StatusLine,
    TruncatedMessage,
    ZbusDecodeError,
)

PRODUCE = (
    b"GET / HTTP/1.1\r\ncmd: produce\r\nmq: MyMQ\r\nmsgid: m1\r\ncontent-length: 5\r\n\r\nhello"
)
WORKER_REPLY = (
    b"HTTP/1.1 200 OK\r\n"
    b"cmd: produce\r\n"
    b"mq: reply-q\r\n"
    b"msgid: r1\r\n"
    b"ack: 0\r\n"
    b"content-length: 6\r\n"
    b"\r\n"
    b"result"
)
CONSUME = b"GET /MyMQ?cmd=consume&&msgid=c1 HTTP/1.1\r\n\r\n"


def decode_all(data: bytes, **limits: int) -> list[Message | ZbusDecodeError]:
    return Decoder(**limits).feed(data)


def only_message(data: bytes) -> Message:
    events = decode_all(data)
    assert len(events) == 1
    assert isinstance(events[0], Message)
    return events[0]


def test_request_shaped_produce() -> None:
    message = only_message(PRODUCE)
    assert message.start == RequestLine("GET", "/", "HTTP/1.1")
    assert not message.is_response
    assert message.status is None
    assert dict(message.headers) == {"cmd": "produce", "mq": "MyMQ", "msgid": "m1"}
    assert message.body == b"hello"
    assert (message.command, message.mq, message.msgid) == ("produce", "MyMQ", "m1")


def test_response_shaped_worker_reply() -> None:
    message = only_message(WORKER_REPLY)
    assert message.start == StatusLine(200, "OK", "HTTP/1.1")
    assert message.is_response
    assert message.status == 200
    assert message.command == "produce"
    assert message.mq == "reply-q"
    assert message.ack is False
    assert message.body == b"result"


@pytest.mark.parametrize(
    ("line", "start"),
    [
        (b"POST /x HTTP/1.1", RequestLine("POST", "/x", "HTTP/1.1")),
        (b"SUBSCRIBE / HTTP/1.0", RequestLine("SUBSCRIBE", "/", "HTTP/1.0")),
        (b"HTTP/1.1 404 Not Found", StatusLine(404, "Not Found", "HTTP/1.1")),
        (
            b"http/1.1 500 Internal Server Error",
            StatusLine(500, "Internal Server Error", "http/1.1"),
        ),
        (b"HTTP/1.1 200", StatusLine(200, "", "HTTP/1.1")),
        (b"HTTP/1.1 201 ", StatusLine(201, "", "HTTP/1.1")),
    ],
)
def test_start_line_shapes(line: bytes, start: RequestLine | StatusLine) -> None:
    assert only_message(line + b"\r\n\r\n").start == start


def test_header_rules() -> None:
    message = only_message(
        b"GET / HTTP/1.1\r\n"
        b"  CMD :  produce  \r\n"
        b"this line has no colon\r\n"
        b"Broker: 10.0.0.1:15555\r\n"
        b"mq: first\r\n"
        b"MQ: second\r\n"
        b"x-empty:\r\n"
        b"x-tab:\tvalue\t\r\n"
        b"\r\n"
    )
    assert dict(message.headers) == {
        "cmd": "produce",
        "broker": "10.0.0.1:15555",
        "mq": "second",
        "x-empty": "",
        "x-tab": "value",
    }
    assert message.broker == "10.0.0.1:15555"


def test_utf8_header_values() -> None:
    message = only_message("GET / HTTP/1.1\r\nmq: 订单\r\ntopic: 新闻\r\n\r\n".encode())
    assert message.mq == "订单"
    assert message.topic == "新闻"


def test_body_length_rules() -> None:
    assert only_message(b"GET / HTTP/1.1\r\ncmd: heartbeat\r\n\r\n").body == b""
    assert only_message(b"GET / HTTP/1.1\r\ncontent-length: 0\r\n\r\n").body == b""
    body = b"\r\n\r\nbinary\x00\xff"
    data = b"GET / HTTP/1.1\r\nContent-Length:  %d \r\n\r\n" % len(body) + body
    assert only_message(data).body == body
    repeated = b"GET / HTTP/1.1\r\ncontent-length: 9\r\ncontent-length: 2\r\n\r\nok"
    assert only_message(repeated).body == b"ok"
    padded = b"GET / HTTP/1.1\r\ncontent-length: 0003\r\n\r\nabc"
    assert only_message(padded).body == b"abc"


def test_content_length_is_not_a_header() -> None:
    assert "content-length" not in only_message(PRODUCE).headers


def test_several_messages_in_one_feed() -> None:
    events = decode_all(PRODUCE + WORKER_REPLY + CONSUME)
    assert [e.command for e in events if isinstance(e, Message)] == [
        "produce",
        "produce",
        "consume",
    ]


def test_byte_by_byte_equals_whole_feed() -> None:
    stream = PRODUCE + WORKER_REPLY + b"\r\n" + CONSUME + PRODUCE
    decoder = Decoder()
    events: list[Message | ZbusDecodeError] = []
    for index in range(len(stream)):
        events += decoder.feed(stream[index : index + 1])
    assert events == decode_all(stream)
    assert len(events) == 4
    assert decoder.eof() is None


@given(
    st.lists(
        st.sampled_from(
            [PRODUCE, WORKER_REPLY, CONSUME, b"\r\n", b"GET /x HTTP/1.1\r\nbad\r\n\r\n"]
        ),
        max_size=8,
    ),
    st.lists(st.integers(0, 400), max_size=12),
)
def test_any_split_of_a_stream_decodes_as_the_whole(parts: list[bytes], cuts: list[int]) -> None:
    """Chunks that start on a message boundary (parsed as they came) and chunks that
    complete a held part decode to what the whole stream does."""
    stream = b"".join(parts)
    bounds = sorted({min(c, len(stream)) for c in cuts} | {0, len(stream)})
    decoder = Decoder()
    events: list[Message | ZbusDecodeError] = []
    for start, end in itertools.pairwise(bounds):
        events += decoder.feed(stream[start:end])
    assert events == decode_all(stream)
    assert decoder.eof() is None


def test_body_waits_for_more_bytes() -> None:
    decoder = Decoder()
    assert decoder.feed(PRODUCE[:-2]) == []
    assert decoder.feed(b"") == []
    (message,) = decoder.feed(PRODUCE[-2:])
    assert isinstance(message, Message)
    assert message.body == b"hello"


def test_leading_empty_lines_are_skipped() -> None:
    events = decode_all(b"\r\n\r\n\r\n" + PRODUCE + b"\r\n" + PRODUCE)
    assert len(events) == 2
    assert all(isinstance(e, Message) for e in events)


@pytest.mark.parametrize(
    "line",
    [
        b"GET /",
        b"GET / HTTP/1.1 extra",
        b"GET  / HTTP/1.1",
        b"G(T / HTTP/1.1",
        b"GET / FTP/1.1",
        b"HTTP/1.1 20 OK",
        b"HTTP/1.1 abc OK",
        b"HTTP/1.1 099 Low",
        b"HTTPX 200 OK",
        b"GET /\x01 HTTP/1.1",
        b"GET /\xff HTTP/1.1",
    ],
)
def test_malformed_start_line_is_recoverable(line: bytes) -> None:
    data = line + b"\r\nmsgid: bad-1\r\ncontent-length: 3\r\n\r\nxyz" + PRODUCE
    decoder = Decoder()
    error, message = decoder.feed(data)
    assert isinstance(error, MalformedStartLine)
    assert error.fatal is False
    assert error.msgid == "bad-1"
    assert error.reply_body == "Bad format: malformed start line"
    assert isinstance(message, Message)
    assert message.body == b"hello"
    assert not decoder.closed


@pytest.mark.parametrize(
    "line",
    [b"x-bad: a\x00b", b": no name", b"x-bad: \xff\xfe", b"x-bad\x7f: v", b"x-bad: a\nb"],
)
def test_malformed_header_is_recoverable(line: bytes) -> None:
    data = b"GET / HTTP/1.1\r\nid: bad-2\r\n" + line + b"\r\ncontent-length: 1\r\n\r\nz" + PRODUCE
    error, message = decode_all(data)
    assert isinstance(error, MalformedHeader)
    assert error.fatal is False
    assert error.msgid == "bad-2"
    assert isinstance(message, Message)
    assert message.msgid == "m1"


def test_url_parameter_with_control_character_is_malformed() -> None:
    error, message = decode_all(b"GET /?msgid=u1&x=a%0Db HTTP/1.1\r\n\r\n" + PRODUCE)
    assert isinstance(error, MalformedStartLine)
    assert error.msgid == "u1"
    assert isinstance(message, Message)


def test_url_parameter_with_colon_in_name_is_malformed() -> None:
    (error,) = decode_all(b"GET /?a%3Ab=1 HTTP/1.1\r\n\r\n")
    assert isinstance(error, MalformedStartLine)


@pytest.mark.parametrize("value", [b"abc", b"-1", b"1.5", b"", b"+3", b"0x10", b"1 2"])
def test_bad_content_length_is_fatal(value: bytes) -> None:
    decoder = Decoder()
    events = decoder.feed(
        PRODUCE + b"GET /?msgid=p1 HTTP/1.1\r\ncontent-length: " + value + b"\r\n\r\n"
    )
    assert isinstance(events[0], Message)
    error = events[1]
    assert isinstance(error, BadContentLength)
    assert error.fatal is True
    assert error.msgid == "p1"
    assert decoder.closed
    with pytest.raises(DecoderClosedError):
        decoder.feed(PRODUCE)


def test_body_too_large_is_reported_before_the_body_arrives() -> None:
    decoder = Decoder(max_body_bytes=10)
    (error,) = decoder.feed(b"GET / HTTP/1.1\r\nmsgid: big\r\ncontent-length: 11\r\n\r\n")
    assert isinstance(error, BodyTooLarge)
    assert error.fatal is True
    assert error.msgid == "big"
    assert error.reply_body == "Bad format: message too large"
    assert decoder.closed


def test_huge_content_length_is_too_large() -> None:
    (error,) = decode_all(b"GET / HTTP/1.1\r\ncontent-length: " + b"9" * 5000 + b"\r\n\r\n")
    assert isinstance(error, BodyTooLarge)


def test_body_limit_is_inclusive() -> None:
    data = b"GET / HTTP/1.1\r\ncontent-length: 10\r\n\r\n0123456789"
    (message,) = decode_all(data, max_body_bytes=10)
    assert isinstance(message, Message)


def test_default_body_limit_is_16_mib() -> None:
    ok = b"GET / HTTP/1.1\r\ncontent-length: 16777216\r\n\r\n"
    assert Decoder().feed(ok) == []
    (error,) = decode_all(b"GET / HTTP/1.1\r\ncontent-length: 16777217\r\n\r\n")
    assert isinstance(error, BodyTooLarge)


def test_head_limit_boundary() -> None:
    head = b"GET / HTTP/1.1\r\nx: " + b"a" * 20 + b"\r\n\r\n"
    (message,) = decode_all(head, max_head_bytes=len(head))
    assert isinstance(message, Message)
    (error,) = decode_all(head, max_head_bytes=len(head) - 1)
    assert isinstance(error, HeadTooLarge)
    assert error.fatal is True
    assert error.reply_body == "Bad format: message too large"


def test_head_too_large_without_terminator_is_detected_early() -> None:
    decoder = Decoder(max_head_bytes=100)
    assert decoder.feed(b"GET / HTTP/1.1\r\n" + b"x" * 50) == []
    (error,) = decoder.feed(b"x" * 50)
    assert isinstance(error, HeadTooLarge)
    assert decoder.closed


def test_default_head_limit_is_64_kib() -> None:
    line = b"x-pad: " + b"p" * (64 * 1024 - 40) + b"\r\n"
    fits = b"GET / HTTP/1.1\r\n" + line + b"\r\n"
    assert len(fits) <= 64 * 1024
    assert isinstance(decode_all(fits)[0], Message)
    (error,) = decode_all(b"GET / HTTP/1.1\r\n" + line + b"x: " + b"y" * 64 + b"\r\n\r\n")
    assert isinstance(error, HeadTooLarge)


def test_messages_before_a_fatal_error_are_kept() -> None:
    events = decode_all(
        PRODUCE + CONSUME + b"GET / HTTP/1.1\r\ncontent-length: x\r\n\r\n" + PRODUCE
    )
    assert [type(e) for e in events] == [Message, Message, BadContentLength]


def test_eof_inside_body_reports_truncation() -> None:
    decoder = Decoder()
    assert decoder.feed(PRODUCE[:-3]) == []
    error = decoder.eof()
    assert isinstance(error, TruncatedMessage)
    assert error.fatal is True
    assert error.msgid == "m1"
    assert "3 bytes short" in str(error)
    assert decoder.closed


def test_eof_inside_head_reports_truncation() -> None:
    decoder = Decoder()
    assert decoder.feed(b"GET / HTTP/1.1\r\nmsgid: m") == []
    assert isinstance(decoder.eof(), TruncatedMessage)


def test_clean_eof() -> None:
    decoder = Decoder()
    decoder.feed(PRODUCE + b"\r\n")
    assert decoder.eof() is None
    assert decoder.eof() is None
    with pytest.raises(DecoderClosedError):
        decoder.feed(b"")
