"""The length-prefixed TCP stream (vibemq.md §1): incremental decoding and close behaviour."""

from __future__ import annotations

import pytest

from brokers.protocols.vibemq import (
    DecoderClosedError,
    ErrorCode,
    Frame,
    FrameDecoder,
    FrameTooLarge,
    InvalidJson,
    InvalidUtf8,
    Ping,
    ProtocolError,
    Publish,
    Subscribe,
    TruncatedFrame,
    UnknownCommand,
    ZeroLengthFrame,
    encode_frame,
    error_for,
)

PING = encode_frame(Ping(id="p1"))
PUBLISH = encode_frame(Publish(id="m1", queue="orders", payload={"n": 1}))
SUBSCRIBE = encode_frame(Subscribe(id="s1", queue="orders"))


def prefixed(body: bytes) -> bytes:
    return len(body).to_bytes(4, "big") + body


def test_prefix_is_big_endian_length() -> None:
    assert PING[:4] == len(PING[4:]).to_bytes(4, "big")


def test_several_frames_in_one_feed() -> None:
    events = FrameDecoder().feed(PING + PUBLISH + SUBSCRIBE)
    assert [e.id for e in events if not isinstance(e, ProtocolError)] == ["p1", "m1", "s1"]


def test_byte_by_byte() -> None:
    stream = PING + PUBLISH + SUBSCRIBE
    decoder = FrameDecoder()
    events: list[Frame | ProtocolError] = []
    for index in range(len(stream)):
        events += decoder.feed(stream[index : index + 1])
    assert events == FrameDecoder().feed(stream)
    assert decoder.eof() is None


def test_partial_frame_waits() -> None:
    decoder = FrameDecoder()
    assert decoder.feed(PUBLISH[:3]) == []
    assert decoder.feed(PUBLISH[3:-1]) == []
    (frame,) = decoder.feed(PUBLISH[-1:])
    assert isinstance(frame, Publish)


def test_zero_length_closes_silently() -> None:
    decoder = FrameDecoder()
    events = decoder.feed(PING + b"\x00\x00\x00\x00" + PING)
    assert isinstance(events[0], Ping)
    error = events[1]
    assert isinstance(error, ZeroLengthFrame)
    assert len(events) == 2
    assert error.close is True
    assert error.error_code is None
    assert error_for(error) is None
    assert decoder.closed
    with pytest.raises(DecoderClosedError):
        decoder.feed(PING)


def test_oversized_frame_is_rejected_from_its_prefix() -> None:
    decoder = FrameDecoder(max_frame_size=100)
    (error,) = decoder.feed((101).to_bytes(4, "big"))
    assert isinstance(error, FrameTooLarge)
    assert error.close is True
    assert error_for(error) is None


def test_max_frame_size_is_inclusive_and_defaults_to_1_mib() -> None:
    body = b'{"id":"p","type":"ping","pad":"' + b"x" * 100 + b'"}'
    (frame,) = FrameDecoder(max_frame_size=len(body)).feed(prefixed(body))
    assert frame == Ping(id="p")
    assert FrameDecoder().feed((1_048_576).to_bytes(4, "big")) == []
    (error,) = FrameDecoder().feed((1_048_577).to_bytes(4, "big"))
    assert isinstance(error, FrameTooLarge)
    (error,) = FrameDecoder().feed(b"\xff\xff\xff\xff")
    assert isinstance(error, FrameTooLarge)


def test_recoverable_errors_keep_the_stream_open() -> None:
    decoder = FrameDecoder()
    bad = prefixed(b'{"id": "u1", "type": "nonsense"}')
    events = decoder.feed(PING + bad + PUBLISH)
    assert isinstance(events[1], UnknownCommand)
    assert events[1].request_id == "u1"
    assert isinstance(events[2], Publish)
    assert not decoder.closed


@pytest.mark.parametrize(
    ("body", "error_type"),
    [(b"\xff\xfe", InvalidUtf8), (b"{oops", InvalidJson), (b"[]", InvalidJson)],
)
def test_unparseable_body_sends_invalid_message_and_closes(
    body: bytes, error_type: type[ProtocolError]
) -> None:
    decoder = FrameDecoder()
    events = decoder.feed(PING + prefixed(body) + PING)
    assert len(events) == 2
    error = events[1]
    assert isinstance(error, error_type)
    assert error.close is True
    frame = error_for(error)
    assert frame is not None
    assert frame.error_code == ErrorCode.INVALID_MESSAGE
    assert decoder.closed


@pytest.mark.parametrize("cut", [1, 3, 4, 10])
def test_eof_inside_a_frame(cut: int) -> None:
    decoder = FrameDecoder()
    assert decoder.feed(PING + PUBLISH[:cut]) == [Ping(id="p1")]
    error = decoder.eof()
    assert isinstance(error, TruncatedFrame)
    assert error.close is True
    assert error_for(error) is None
    assert decoder.eof() is None


def test_clean_eof_then_closed() -> None:
    decoder = FrameDecoder()
    decoder.feed(PING)
    assert decoder.eof() is None
    assert decoder.closed
    with pytest.raises(DecoderClosedError):
        decoder.feed(b"")


def test_server_frames_option() -> None:
    pong = prefixed(b'{"id": "p1", "type": "pong"}')
    (error,) = FrameDecoder().feed(pong)
    assert isinstance(error, UnknownCommand)
    (frame,) = FrameDecoder(accept_server_frames=True).feed(pong)
    assert frame.id == "p1"
