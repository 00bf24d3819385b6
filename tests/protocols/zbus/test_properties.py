"""Property tests: encode/decode round trips, arbitrary chunking, and a mutation fuzz."""

from __future__ import annotations

import random

from hypothesis import example, given, settings
from hypothesis import strategies as st

from brokers.protocols.zbus import (
    AliasFamily,
    Decoder,
    EncodeError,
    Message,
    RequestLine,
    StatusLine,
    ZbusDecodeError,
    encode_message,
    encode_reply,
    make_delivery,
    make_reply,
)
from brokers.protocols.zbus.head import _parse_head_lines, parse_head
from tests.protocols.chunked import feed_in_chunks

_ALIASES = {"id", "rawid", "msgid-raw", "mq-reply", "method", "reply-code", "content-length"}
_KEY_CHARS = "abcdefghijklmnopqrstuvwxyz0123456789-_."
_TEXT = st.characters(codec="utf-8", exclude_categories=("Cc", "Cs"))

keys = st.text(_KEY_CHARS, min_size=1, max_size=20).filter(lambda k: k not in _ALIASES)
values = st.text(_TEXT, max_size=40).map(lambda v: v.strip(" \t"))
headers = st.dictionaries(keys, values, max_size=8)
bodies = st.binary(max_size=300)
methods = st.sampled_from(["GET", "POST", "PUT", "X-CMD"])
paths = st.text(st.sampled_from("abcXYZ019-._~/"), max_size=20).map(lambda p: "/" + p)
request_lines = st.builds(RequestLine, methods, paths)
status_lines = st.builds(
    StatusLine, st.integers(100, 999), st.text(_TEXT | st.just("\t"), max_size=30)
)
messages = st.builds(Message, st.one_of(request_lines, status_lines), headers, bodies)


def decode_stream(data: bytes, chunks: list[int]) -> list[Message | ZbusDecodeError]:
    decoder = Decoder()
    events: list[Message | ZbusDecodeError] = []
    pos = 0
    for size in chunks:
        events += decoder.feed(data[pos : pos + size])
        pos += size
    events += decoder.feed(data[pos:])
    assert decoder.eof() is None
    return events


@settings(deadline=None)
@given(messages)
def test_message_round_trip(message: Message) -> None:
    assert Decoder().feed(encode_message(message)) == [message]


@settings(deadline=None)
@given(st.lists(messages, min_size=1, max_size=5), st.lists(st.integers(0, 40), max_size=40))
def test_any_chunking_yields_the_same_messages(batch: list[Message], chunks: list[int]) -> None:
    data = b"".join(encode_message(m) for m in batch)
    assert decode_stream(data, chunks) == batch


@settings(deadline=None)
@given(
    st.integers(100, 999),
    bodies,
    headers,
    st.none() | values,
    st.sampled_from(list(AliasFamily)),
)
def test_reply_round_trip(
    status: int, body: bytes, extra: dict[str, str], msgid: str | None, family: AliasFamily
) -> None:
    reply = make_reply(status, body, msgid=msgid, mq_reply="s", headers=extra)
    (decoded,) = Decoder().feed(encode_message(reply, aliases=family))
    assert isinstance(decoded, Message)
    assert decoded.status == status
    assert decoded.body == body
    assert dict(decoded.headers) == dict(reply.headers)


@settings(deadline=None)
@given(messages, st.none() | values, st.booleans())
def test_delivery_round_trip(stored: Message, msgid: str | None, redelivered: bool) -> None:
    delivered = make_delivery(stored, msgid=msgid, redelivered=redelivered)
    (decoded,) = Decoder().feed(encode_message(delivered))
    assert decoded == delivered
    assert "token" not in decoded.headers


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400))
def test_arbitrary_bytes_only_raise_typed_errors(data: bytes) -> None:
    decoder = Decoder(max_head_bytes=256, max_body_bytes=128)
    events = decoder.feed(data)
    assert all(isinstance(e, Message | ZbusDecodeError) for e in events)
    truncated = decoder.eof()
    assert truncated is None or isinstance(truncated, ZbusDecodeError)


SEEDS = [
    b"GET /MyMQ?cmd=produce&&msgid=m1&&body=hello HTTP/1.1\r\n\r\n",
    b"GET / HTTP/1.1\r\ncmd: consume\r\nmq: q\r\nid: c1\r\nwindow: -1\r\n\r\n",
    b"HTTP/1.1 200 OK\r\ncmd: produce\r\nmq-reply: r\r\nmsgid: r1\r\ncontent-length: 4\r\n\r\nbody",
    b'POST /?cmd=admin&method=create_mq HTTP/1.1\r\ncontent-length: 12\r\n\r\n{"mqName":1}',
]


def mutate(rng: random.Random, data: bytes) -> bytes:
    buf = bytearray(data)
    for _ in range(rng.randint(1, 6)):
        op = rng.randrange(5)
        pos = rng.randrange(len(buf) + 1)
        if op == 0 and buf:
            buf[min(pos, len(buf) - 1)] = rng.randrange(256)
        elif op == 1:
            buf[pos:pos] = rng.choice(
                [b"\r\n", b":", b" ", b"\x00", b"%", b"?", b"&", b"9", b"\xff"]
            )
        elif op == 2:
            del buf[pos : pos + rng.randint(1, 8)]
        elif op == 3:
            buf[pos:pos] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
        else:
            buf[pos:pos] = rng.choice([b"content-length: 99999\r\n", b"content-length: 3\r\n"])
    return bytes(buf)


def test_mutation_fuzz_only_typed_errors_escape() -> None:
    rng = random.Random(20150101)
    for _ in range(3000):
        data = b"".join(mutate(rng, rng.choice(SEEDS)) for _ in range(rng.randint(1, 3)))
        decoder = Decoder(max_head_bytes=rng.choice([64, 512, 65536]), max_body_bytes=64)
        events: list[Message | ZbusDecodeError] = []
        pos = 0
        while pos < len(data) and not decoder.closed:
            step = rng.randint(1, 64)
            events += decoder.feed(data[pos : pos + step])
            pos += step
        truncated = decoder.eof()
        assert truncated is None or isinstance(truncated, ZbusDecodeError)
        for event in events:
            assert isinstance(event, Message | ZbusDecodeError)
            if isinstance(event, Message):
                assert Decoder().feed(encode_message(event))[0].headers == event.headers


_PARTS = st.sampled_from(
    ["cmd", "mq", "msgid", "id", "Content-Length", "content-length", "MQ", "X-A", " ", "\t",
     ":", "\r", "\n", "\x00", "\x7f", "é", "\u212a", "12", "-1", "a", "=", "?"]
)  # fmt: skip
_TEXTS = st.lists(_PARTS, max_size=4).map("".join)
_STARTS = st.sampled_from(["GET / HTTP/1.1", "HTTP/1.1 200 OK", "GET /q?msgid=u&id=v HTTP/1.1"])
_HEADER_LINES = st.builds(
    lambda key, colon, value: key + colon + value,
    _TEXTS,
    st.sampled_from([":", ": ", " :\t", "", "::"]),
    _TEXTS,
)
_HEAD_LINES = st.builds(
    lambda start, lines: [start, *lines], _STARTS | _TEXTS, st.lists(_HEADER_LINES, max_size=5)
)


@settings(max_examples=500, deadline=None)
@given(_HEAD_LINES, st.sampled_from([b"", b"\xff", b"\xc3"]), st.sampled_from([5, 1000]))
@example(["GET / HTTP/1.1", "content-length: a"], b"", 1000)
@example(["GET / HTTP/1.1", "Content-Length:\t12 "], b"", 5)
def test_the_one_decode_head_parser_agrees_with_the_line_by_line_one(
    lines: list[str], tail: bytes, max_body: int
) -> None:
    """``parse_head`` decodes a clean block once; any block — control characters, bare
    CR or LF, bad UTF-8, empty names, bad lengths — gives what the line-by-line parser
    gives, with its line caches cold or warm."""
    block = "\r\n".join(lines).encode() + tail

    def outcome(parse):  # the head, or the fatal error's type and message
        try:
            head = parse(block, max_body)
        except ZbusDecodeError as exc:
            return type(exc), str(exc)
        problem = head.problem
        return (
            head.start, head.headers, head.content_length, head.msgid,
            None if problem is None else (type(problem), str(problem), problem.msgid),
        )  # fmt: skip

    # twice: the first parse may fill the line caches the second reads
    assert outcome(parse_head) == outcome(_parse_head_lines) == outcome(parse_head)


@settings(deadline=None)
@given(
    st.integers(100, 999),
    bodies,
    st.none() | values | st.just("a\nb"),
    st.none() | values,
    st.sampled_from([AliasFamily.NONE, AliasFamily.ID, AliasFamily.HYPHEN, AliasFamily(3)]),
)
def test_one_pass_reply_writes_what_the_message_path_writes(
    status: int, body: bytes, msgid: str | None, mq_reply: str | None, family: AliasFamily
) -> None:
    """``encode_reply`` (every produce's ack) writes the bytes, or raises the error, of
    ``make_reply`` + ``encode_message``."""

    def outcome(encode):
        try:
            return encode()
        except EncodeError as exc:
            return type(exc)

    slow = outcome(
        lambda: encode_message(
            make_reply(status, body, msgid=msgid, mq_reply=mq_reply), aliases=family
        )
    )
    fast = outcome(
        lambda: encode_reply(status, body, msgid=msgid, mq_reply=mq_reply, aliases=family)
    )
    assert fast == slow


def _events(data: bytes, chunks: list[int]) -> list[object]:
    """Every event of ``data`` fed in ``chunks``, errors as their type, message and msgid."""
    return feed_in_chunks(
        Decoder(max_head_bytes=256, max_body_bytes=64),
        data,
        chunks,
        lambda e: (type(e), str(e), e.msgid) if isinstance(e, ZbusDecodeError) else None,
    )


_PIECES = st.one_of(
    messages.filter(lambda m: len(m.body) <= 64).map(encode_message),
    st.sampled_from(
        [
            b"\r\n",
            b"GET / HTTP/1.1\r\ncontent-length: x\r\n\r\n",
            b"GET / HTTP/1.1\r\ncontent-length: 999\r\n\r\n",
            b"BAD\r\nmsgid: m\r\ncontent-length: 1\r\n\r\nz",
            b"GET / HTTP/1.1\r\n" + b"a" * 300,
        ]
    ),
    st.binary(max_size=8),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_PIECES, max_size=5).map(b"".join), st.lists(st.integers(0, 40), max_size=30))
@example(b"\r\n\r\n\r\n\r\n\x00", [6])  # a head cut off after empty lines: counted alike
def test_any_stream_decodes_the_same_in_any_chunks(data: bytes, chunks: list[int]) -> None:
    """Messages, bad heads, over-long heads and bodies, stray bytes: fed in pieces or
    whole, the same events (a decoder copies what arrived only once it completes a head
    or a body, and scans a head still arriving from where it stopped)."""
    assert _events(data, chunks) == _events(data, [])
