"""Decoding one JSON text (vibemq.md §1–§4, §13): type casing, validation and typed errors."""

from __future__ import annotations

import msgspec
import pytest

from brokers.protocols.vibemq import (
    SERVER_ONLY_TYPES,
    CommandType,
    Deliver,
    Disconnect,
    EncodeError,
    Error,
    ErrorCode,
    InvalidJson,
    InvalidMessage,
    InvalidQueue,
    InvalidUtf8,
    ListQueues,
    Ping,
    ProtocolError,
    Publish,
    Subscribe,
    UnknownCommand,
    decode_json,
    encode_json,
    error_for,
)


def expect(error: type[ProtocolError], text: str | bytes) -> ProtocolError:
    with pytest.raises(error) as caught:
        decode_json(text)
    return caught.value


@pytest.mark.parametrize("kind", ['"publish"', '"Publish"', '"PUBLISH"', '"pUbLiSh"', "20"])
def test_type_is_case_insensitive_or_numeric(kind: str) -> None:
    text = f'{{"id": "m", "type": {kind}, "queue": "q"}}'
    assert decode_json(text) == Publish(id="m", queue="q")


def test_every_type_code() -> None:
    codes = {t: t.code for t in CommandType}
    assert codes == {
        CommandType.CONNECT: 0,
        CommandType.CONNECT_ACK: 1,
        CommandType.DISCONNECT: 2,
        CommandType.PING: 10,
        CommandType.PONG: 11,
        CommandType.PUBLISH: 20,
        CommandType.PUBLISH_ACK: 21,
        CommandType.SUBSCRIBE: 22,
        CommandType.SUBSCRIBE_ACK: 23,
        CommandType.UNSUBSCRIBE: 24,
        CommandType.UNSUBSCRIBE_ACK: 25,
        CommandType.DELIVER: 26,
        CommandType.ACK: 30,
        CommandType.CREATE_QUEUE: 40,
        CommandType.DELETE_QUEUE: 41,
        CommandType.QUEUE_INFO: 42,
        CommandType.LIST_QUEUES: 43,
        CommandType.ERROR: 99,
    }
    for kind, code in codes.items():
        assert CommandType.parse(code) is kind
        assert CommandType.parse(kind.value.upper()) is kind


@pytest.mark.parametrize("kind", ['"subscribe"', '"Subscribe"', "22"])
def test_subscribe_spellings(kind: str) -> None:
    assert decode_json(f'{{"id":"s","type":{kind},"queue":"q"}}') == Subscribe(id="s", queue="q")


@pytest.mark.parametrize("kind", ['"foo"', "5", "20.0", "true", "[]", '""', "{}"])
def test_unknown_type(kind: str) -> None:
    error = expect(UnknownCommand, f'{{"id": "x1", "type": {kind}}}')
    assert error.request_id == "x1"
    assert error.error_code is ErrorCode.UNKNOWN_COMMAND
    assert error.close is False


@pytest.mark.parametrize("kind", sorted(SERVER_ONLY_TYPES))
def test_server_only_types_from_a_client(kind: CommandType) -> None:
    text = (
        f'{{"id": "x2", "type": "{kind.value}", "queue": "q",'
        ' "errorCode": "SERVER_ERROR", "errorMessage": "m"}'
    )
    error = expect(UnknownCommand, text)
    assert error.request_id == "x2"
    assert decode_json(text, accept_server_frames=True).TYPE is kind


def test_missing_type() -> None:
    error = expect(InvalidMessage, '{"id": "x3"}')
    assert error.request_id == "x3"
    assert error.close is False


@pytest.mark.parametrize(
    "text",
    [
        '{"type": "ping"}',
        '{"id": null, "type": "ping"}',
        '{"id": "", "type": "ping"}',
        '{"id": 17, "type": "ping"}',
        '{"id": ["a"], "type": "ping"}',
        '{"id": "' + "i" * 257 + '", "type": "ping"}',
        '{"type": "disconnect"}',
    ],
)
def test_missing_or_invalid_id(text: str) -> None:
    error = expect(InvalidMessage, text)
    assert error.request_id is None
    assert error.error_code is ErrorCode.INVALID_MESSAGE


def test_id_length_limit() -> None:
    assert decode_json('{"id": "' + "i" * 256 + '", "type": "ping"}') == Ping(id="i" * 256)
    assert decode_json('{"id": "é", "type": "ping"}') == Ping(id="é")


def test_server_disconnect_may_lack_an_id() -> None:
    text = '{"type": "disconnect", "headers": {"reason": "server_shutdown"}}'
    frame = decode_json(text, accept_server_frames=True)
    assert frame == Disconnect(headers={"reason": "server_shutdown"})


@pytest.mark.parametrize(
    "queue",
    ['""', "null", "5", '"a b"', '"a/b"', '"очередь"', '"' + "q" * 257 + '"', '"tab\\t"'],
)
def test_invalid_queue(queue: str) -> None:
    error = expect(InvalidQueue, f'{{"id": "x4", "type": "subscribe", "queue": {queue}}}')
    assert error.request_id == "x4"
    assert error.error_code is ErrorCode.INVALID_QUEUE
    assert error.close is False


@pytest.mark.parametrize(
    "kind", ["publish", "subscribe", "unsubscribe", "createQueue", "deleteQueue", "queueInfo"]
)
def test_queue_required(kind: str) -> None:
    expect(InvalidQueue, f'{{"id": "x5", "type": "{kind}"}}')


def test_queue_name_alphabet_and_length() -> None:
    name = "Az09._-" + "q" * 249
    assert decode_json(f'{{"id":"s","type":"subscribe","queue":"{name}"}}') == Subscribe(
        id="s", queue=name
    )


def test_queue_checked_on_any_frame_that_carries_one() -> None:
    expect(InvalidQueue, '{"id": "x6", "type": "ping", "queue": "bad name"}')
    assert decode_json('{"id": "x6", "type": "ping", "queue": "fine"}') == Ping(id="x6")


def test_header_limits_accepted() -> None:
    headers = {f"k{i}": "v" for i in range(49)}
    headers["k" * 256] = "v" * 4096
    frame = Publish(id="p", queue="q", headers=headers)
    assert decode_json(encode_json(frame)) == frame


@pytest.mark.parametrize(
    "headers",
    [
        '{"a": 1}',
        '{"a": null}',
        '{"a": {"b": "c"}}',
        '{"a": true}',
        '["a"]',
        '"a"',
        '{"": "v"}',
        '{"' + "k" * 257 + '": "v"}',
        '{"a": "' + "v" * 4097 + '"}',
        "{" + ",".join(f'"k{i}": "v"' for i in range(51)) + "}",
    ],
)
def test_invalid_headers(headers: str) -> None:
    error = expect(
        InvalidMessage, f'{{"id": "x7", "type": "publish", "queue": "q", "headers": {headers}}}'
    )
    assert error.request_id == "x7"
    assert error.close is False


def test_nulls_and_unknown_fields_are_ignored() -> None:
    text = (
        '{"id": "l", "type": "listQueues", "queue": null, "headers": null, "payload": null,'
        ' "schemaVersion": "2.0", "extra": {"deep": [1, 2]}}'
    )
    assert decode_json(text) == ListQueues(id="l")


def test_headers_on_frames_that_do_not_keep_them_are_still_validated() -> None:
    expect(InvalidMessage, '{"id": "x8", "type": "ping", "headers": {"a": 1}}')


@pytest.mark.parametrize(
    "data",
    [b'{"id": "x", "type": "ping", "s": "\xff"}', b"\xc3", b"\xed\xa0\x80", "\ud800"],
)
def test_invalid_utf8(data: bytes | str) -> None:
    error = expect(InvalidUtf8, data)
    assert error.request_id is None
    assert error.error_code is ErrorCode.INVALID_MESSAGE
    assert error.close is True


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"not json",
        b'{"id": "x", "type": "ping"',
        b'{"id": "x"} trailing',
        b"[1, 2]",
        b'"string"',
        b"null",
        b'{"id": "x", "type": "ping", "p": "\\ud800",}',  # not JSON, surrogate or not
        b'{"id": 1e999, "type": "ping"}',
        b'{"id": "x", "type": "publish", "queue": "q", "payload": '
        + b"[" * 5000
        + b"]" * 5000
        + b"}",
        b'{"id": "x", "headers": ' + b"[" * 5000 + b"]" * 5000 + b"}",
    ],
)
def test_invalid_json(data: bytes) -> None:
    error = expect(InvalidJson, data)
    assert error.request_id is None
    assert error.close is True


def test_error_frames_from_the_server() -> None:
    text = '{"id": "e", "type": "error", "errorCode": "QUEUE_FULL"}'
    assert decode_json(text, accept_server_frames=True) == Error(id="e", error_code="QUEUE_FULL")
    with pytest.raises(InvalidMessage):
        decode_json('{"id": "e", "type": "error"}', accept_server_frames=True)
    with pytest.raises(InvalidMessage):
        decode_json(
            '{"id": "e", "type": "error", "errorCode": "X", "errorMessage": 3}',
            accept_server_frames=True,
        )


def test_payload_is_kept_verbatim() -> None:
    text = b'{"id":"p","type":"publish","queue":"q","payload": [1e400, 123456789012345678901234567890, "\\u00e9"] }'
    frame = decode_json(text)
    assert isinstance(frame, Publish)
    assert bytes(frame.payload) == b'[1e400, 123456789012345678901234567890, "\\u00e9"]'


def test_websocket_text_input() -> None:
    assert decode_json('{"id": "ω", "type": "ping"}') == Ping(id="ω")


def test_error_for_decode_errors() -> None:
    unknown = UnknownCommand("unknown command type 'x'", request_id="r1")
    frame = error_for(unknown)
    assert frame is not None
    assert (frame.id, frame.error_code) == ("r1", ErrorCode.UNKNOWN_COMMAND)
    fresh = error_for(InvalidJson("bad"))
    assert fresh is not None
    assert fresh.error_code == "INVALID_MESSAGE"
    assert len(fresh.id) == 32
    queue = error_for(InvalidQueue("bad", request_id="q1"))
    assert queue is not None
    assert queue.error_code == ErrorCode.INVALID_QUEUE


@pytest.mark.parametrize("value", [object(), 1j, [1, object()]])
def test_unencodable_payload(value: object) -> None:
    with pytest.raises(EncodeError):
        encode_json(Publish(id="p", queue="q", payload=value))


def test_a_frame_nested_too_deeply_says_so() -> None:
    """A valid JSON object whose payload nests thousands of levels is refused (the decoder
    must not recurse without bound), and the error says why: it is a JSON object."""
    data = b'{"id": "x", "type": "publish", "queue": "q", "payload": ' + b"[" * 5000
    error = expect(InvalidJson, data + b"]" * 5000 + b"}")
    assert "too deeply" in str(error) and "not a JSON object" not in str(error)
    shallow = b'{"id": "x", "type": "publish", "queue": "q", "payload": ' + b"[" * 100
    frame = decode_json(shallow + b"]" * 100 + b"}")
    assert type(frame).__name__ == "Publish" and frame.queue == "q"


@pytest.mark.parametrize(
    ("data", "field", "echo"),
    [
        (b'{"id": "ls1", "type": "publish", "queue": "q", "payload": "\\ud800"}', "payload", True),
        (
            b'{"id": "ls2", "type": "publish", "queue": "q", "payload": ["a\\uDC00b"]}',
            "payload",
            True,
        ),
        (
            b'{"id": "ls3", "type": "publish", "queue": "q", "headers": {"k": "\\udbff"}}',
            "headers",
            True,
        ),
        (
            b'{"id": "ls4", "type": "publish", "queue": "q", "headers": {"\\ud800": "v"}}',
            "headers",
            True,
        ),
        (b'{"id": "l\\ud800", "type": "ping"}', "id", False),
        (b'{"id": "ls5", "type": "ping", "queue": "\\ud800\\ud800"}', "queue", True),
    ],
)
def test_a_lone_surrogate_escape_is_a_per_request_error(
    data: bytes, field: str, echo: bool
) -> None:
    """A string holding a lone UTF-16 surrogate escape is valid JSON grammar, so the frame is
    a JSON object (§1 closes only for one that is not): INVALID_MESSAGE naming the field,
    echoing the id unless the id holds it, the connection open. No UTF-8 text (a body,
    a header, an id) can carry such a string. Before: "frame is not a JSON object: Input
    data was truncated", and the connection closed."""
    for text in (data, data.decode()):  # TCP bytes, WebSocket text
        error = expect(InvalidMessage, text)
        assert error.close is False and error.error_code is ErrorCode.INVALID_MESSAGE
        assert error.request_id == (data.split(b'"')[3].decode() if echo else None)
        assert str(error).startswith(f"{field} holds a lone UTF-16 surrogate \\u")
        assert "truncated" not in str(error)


def test_a_surrogate_pair_or_an_escaped_backslash_is_no_lone_surrogate() -> None:
    frame = decode_json(
        b'{"id": "p", "type": "publish", "queue": "q", "payload": "\\ud83d\\ude00 \\\\ud800"}'
    )
    assert isinstance(frame, Publish)
    assert msgspec.json.decode(frame.payload) == "\U0001f600 \\ud800"


def test_a_lone_surrogate_in_an_unknown_field_is_ignored_with_the_field() -> None:
    """§1: unknown fields are ignored — whatever their strings hold."""
    assert decode_json(b'{"id": "x", "type": "ping", "p": "\\ud800"}') == Ping(id="x")


def test_a_base64_payload_is_the_body_bytes_both_ways() -> None:
    """The broker's ``encoding`` field (not the publisher's headers) says the payload is the
    base64 of the body: a ``publish`` so carries a binary body, a ``deliver`` so carries a
    body that is not UTF-8; the headers, an ``encoding`` header among them, stay as sent."""
    text = (
        b'{"id": "b", "type": "publish", "queue": "q", "payload": "/wDW0A==",'
        b' "encoding": "base64", "headers": {"encoding": "gbk"}}'
    )
    frame = decode_json(text)
    assert frame == Publish(
        id="b",
        queue="q",
        payload=b"\xff\x00\xd6\xd0",
        encoding="base64",
        headers={"encoding": "gbk"},
    )
    assert msgspec.json.decode(encode_json(frame)) == {
        "id": "b",
        "type": "publish",
        "queue": "q",
        "payload": "/wDW0A==",
        "encoding": "base64",
        "headers": {"encoding": "gbk"},
        "schemaVersion": "1.0",
    }
    plain = decode_json(
        b'{"id": "h", "type": "publish", "queue": "q", "payload": "hello", "headers": {"encoding": "base64"}}'
    )
    assert isinstance(plain, Publish) and plain.encoding is None
    assert bytes(plain.payload) == b'"hello"' and plain.headers == {"encoding": "base64"}
    deliver = (
        b'{"id": "d", "type": "deliver", "queue": "q", "payload": "/w==", "encoding": "base64"}'
    )
    assert decode_json(deliver, accept_server_frames=True) == Deliver(
        id="d", queue="q", payload=b"\xff", encoding="base64"
    )
    assert decode_json(b'{"id": "a", "type": "ack", "encoding": "gbk"}').id == "a"  # not read


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (b'"payload": "/w=", "encoding": "base64"', "not base64"),
        (b'"payload": "\xc3\xa9", "encoding": "base64"', "not base64"),
        (b'"payload": 1, "encoding": "base64"', "needs a payload string"),
        (b'"encoding": "base64"', "needs a payload string"),
        (b'"payload": "/w==", "encoding": "Base64"', "encoding must be"),
        (b'"payload": "/w==", "encoding": 64', "encoding must be"),
    ],
)
def test_a_bad_encoding_is_invalid_message(extra: bytes, message: str) -> None:
    data = b'{"id": "e", "type": "publish", "queue": "q", ' + extra + b"}"
    error = expect(InvalidMessage, data)
    assert error.request_id == "e" and message in str(error)
