"""Property tests: round trips for every frame type, chunked streams, and fuzzing."""

from __future__ import annotations

import json
import random
from typing import Any

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from brokers.protocols.vibemq import (
    Ack,
    Connect,
    ConnectAck,
    CreateQueue,
    DeleteQueue,
    Deliver,
    Disconnect,
    Error,
    ErrorCode,
    Frame,
    FrameDecoder,
    ListQueues,
    Ping,
    Pong,
    ProtocolError,
    Publish,
    PublishAck,
    QueueInfo,
    Subscribe,
    SubscribeAck,
    Unsubscribe,
    UnsubscribeAck,
    decode_json,
    encode_frame,
    encode_json,
    with_length,
    with_lengths,
)
from brokers.protocols.vibemq.frames import FRAME_CLASSES
from tests.protocols.chunked import feed_in_chunks

_TEXT = st.characters(codec="utf-8", exclude_categories=("Cs",))
ids = st.text(_TEXT, min_size=1, max_size=40) | st.text(_TEXT, min_size=256, max_size=256)
queues = st.text("abcXYZ0189._-", min_size=1, max_size=30) | st.just("q" * 256)
headers = st.dictionaries(
    st.text(_TEXT, min_size=1, max_size=20), st.text(_TEXT, max_size=40), max_size=6
)
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(_TEXT, max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(_TEXT, max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
payloads = st.none() | json_values.filter(lambda v: v is not None)

STRATEGIES: dict[type, st.SearchStrategy[Frame]] = {
    Connect: st.builds(Connect, id=ids, headers=headers),
    ConnectAck: st.builds(ConnectAck, id=ids, headers=headers),
    Disconnect: st.builds(Disconnect, id=st.none() | ids, headers=headers),
    Ping: st.builds(Ping, id=ids),
    Pong: st.builds(Pong, id=ids),
    Publish: st.builds(Publish, id=ids, queue=queues, payload=payloads, headers=headers),
    PublishAck: st.builds(PublishAck, id=ids, queue=st.none() | queues, headers=headers),
    Subscribe: st.builds(Subscribe, id=ids, queue=queues),
    SubscribeAck: st.builds(SubscribeAck, id=ids, queue=st.none() | queues, headers=headers),
    Unsubscribe: st.builds(Unsubscribe, id=ids, queue=queues),
    UnsubscribeAck: st.builds(UnsubscribeAck, id=ids, queue=st.none() | queues, headers=headers),
    Deliver: st.builds(Deliver, id=ids, queue=queues, payload=payloads, headers=headers),
    Ack: st.builds(Ack, id=ids, headers=headers),
    CreateQueue: st.builds(CreateQueue, id=ids, queue=queues, payload=payloads, headers=headers),
    DeleteQueue: st.builds(DeleteQueue, id=ids, queue=queues),
    QueueInfo: st.builds(QueueInfo, id=ids, queue=queues, payload=payloads),
    ListQueues: st.builds(ListQueues, id=ids, payload=payloads),
    Error: st.builds(
        Error,
        id=ids,
        error_code=st.sampled_from(list(ErrorCode)),
        error_message=st.text(_TEXT, max_size=40),
    ),
}
frames = st.one_of(*STRATEGIES.values())


def same_frame(decoded: Frame, original: Frame) -> bool:
    """Equal once the decoded Raw payload is compared by the JSON it holds."""
    raw = getattr(decoded, "payload", None)
    if raw is None:
        return decoded == original
    assert msgspec.json.decode(raw) == getattr(original, "payload", None)
    return msgspec.structs.replace(decoded, payload=original.payload) == original


def test_every_frame_type_has_a_strategy() -> None:
    assert set(STRATEGIES) == set(FRAME_CLASSES.values())
    assert len(STRATEGIES) == 18


@settings(deadline=None)
@given(frames)
def test_frame_round_trip(frame: Frame) -> None:
    (decoded,) = FrameDecoder(accept_server_frames=True).feed(encode_frame(frame))
    assert not isinstance(decoded, ProtocolError)
    assert same_frame(decoded, frame)
    assert encode_json(decoded) == encode_json(frame)


@settings(deadline=None)
@given(frames)
def test_json_text_round_trip(frame: Frame) -> None:
    text = encode_json(frame).decode()
    assert json.loads(text)["schemaVersion"] == "1.0"
    assert same_frame(decode_json(text, accept_server_frames=True), frame)


@settings(deadline=None)
@given(st.lists(frames, min_size=1, max_size=5), st.lists(st.integers(0, 50), max_size=30))
def test_any_chunking_yields_the_same_frames(batch: list[Frame], chunks: list[int]) -> None:
    data = b"".join(encode_frame(f) for f in batch)
    decoder = FrameDecoder(accept_server_frames=True)
    events: list[Frame | ProtocolError] = []
    pos = 0
    for size in chunks:
        events += decoder.feed(data[pos : pos + size])
        pos += size
    events += decoder.feed(data[pos:])
    assert decoder.eof() is None
    assert len(events) == len(batch)
    for event, frame in zip(events, batch, strict=True):
        assert not isinstance(event, ProtocolError)
        assert same_frame(event, frame)


@settings(deadline=None)
@given(st.lists(frames, max_size=6))
def test_frames_written_together_decode_as_written_one_by_one(batch: list[Frame]) -> None:
    bodies = [encode_json(f) for f in batch]
    data = with_lengths(bodies)
    assert data == b"".join(with_length(body) for body in bodies)
    events = FrameDecoder(accept_server_frames=True).feed(data)
    assert len(events) == len(batch)
    for event, frame in zip(events, batch, strict=True):
        assert not isinstance(event, ProtocolError)
        assert same_frame(event, frame)


field_values = st.one_of(
    json_values, ids, queues, headers, st.sampled_from(["publish", "ack", 20, 99])
)


@settings(max_examples=400, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(["id", "type", "queue", "payload", "headers", "errorCode", "errorMessage"]),
        field_values,
    ),
    st.booleans(),
)
def test_random_objects_only_raise_protocol_errors(obj: dict[str, Any], server: bool) -> None:
    try:
        frame = decode_json(msgspec.json.encode(obj), accept_server_frames=server)
    except ProtocolError as error:
        assert error.error_code is not None
        return
    again = decode_json(encode_json(frame), accept_server_frames=True)
    assert encode_json(again) == encode_json(frame)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_random_bytes_only_yield_protocol_errors(data: bytes) -> None:
    decoder = FrameDecoder(max_frame_size=200)
    events = decoder.feed(data)
    assert all(isinstance(e, ProtocolError | Frame) for e in events)
    truncated = decoder.eof()
    assert truncated is None or isinstance(truncated, ProtocolError)


SEEDS = [
    Connect(id="c", headers={"authToken": "t"}),
    Publish(
        id="m1", queue="orders", payload={"a": [1, 2.5, None, "x"]}, headers={"priority": "high"}
    ),
    Subscribe(id="s", queue="orders"),
    Ack(id="a", headers={"messageId": "m1"}),
    CreateQueue(id="cq", queue="q", headers={"deliveryMode": "RoundRobin", "messageTtl": "10"}),
    ListQueues(id="l"),
]


def mutate(rng: random.Random, data: bytes) -> bytes:
    buf = bytearray(data)
    for _ in range(rng.randint(1, 5)):
        op = rng.randrange(4)
        pos = rng.randrange(len(buf) + 1)
        if op == 0 and buf:
            buf[min(pos, len(buf) - 1)] = rng.randrange(256)
        elif op == 1:
            buf[pos:pos] = rng.choice(
                [b'"', b"{", b"}", b"[", b",", b":", b"\\", b"\xc3", b"null", b"1e999"]
            )
        elif op == 2:
            del buf[pos : pos + rng.randint(1, 6)]
        else:
            buf[pos:pos] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 6)))
    return bytes(buf)


def test_mutation_fuzz_only_typed_errors_escape() -> None:
    rng = random.Random(2026)
    bodies = [encode_json(f) for f in SEEDS]
    for _ in range(3000):
        body = mutate(rng, rng.choice(bodies))
        if rng.random() < 0.2:
            stream = mutate(rng, len(body).to_bytes(4, "big") + body)
        else:
            stream = len(body).to_bytes(4, "big") + body + encode_frame(rng.choice(SEEDS))
        decoder = FrameDecoder(max_frame_size=rng.choice([16, 256, 1 << 20]))
        events: list[Frame | ProtocolError] = []
        pos = 0
        while pos < len(stream) and not decoder.closed:
            step = rng.randint(1, 40)
            events += decoder.feed(stream[pos : pos + step])
            pos += step
        tail = decoder.eof()
        assert tail is None or isinstance(tail, ProtocolError)
        for event in events:
            assert isinstance(event, ProtocolError | Frame)
            if not isinstance(event, ProtocolError):
                encode_frame(event)
        try:
            frame = decode_json(body)
        except ProtocolError as error:
            assert error.error_code is not None
        else:
            encode_frame(frame)


def _events(decoder: FrameDecoder, data: bytes, chunks: list[int]) -> list[object]:
    """Every event of ``data`` fed in ``chunks``, errors as their type and message."""
    return feed_in_chunks(
        decoder, data, chunks, lambda e: (type(e), str(e)) if isinstance(e, ProtocolError) else None
    )


_PIECES = st.one_of(
    frames.map(encode_frame),
    st.sampled_from(
        [b"\0\0\0\0", b"\0\0\0\x05{bad}", b"\0\0\x10\0", b"\0\0\0\x02{}", b"\0\0\0\x03\xff\xfe\xfd"]
    ),
    st.binary(max_size=8),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_PIECES, max_size=5).map(b"".join), st.lists(st.integers(0, 40), max_size=30))
def test_any_stream_decodes_the_same_in_any_chunks(data: bytes, chunks: list[int]) -> None:
    """Frames, bad frames and stray bytes: fed in pieces or whole, the same events (a
    decoder copies what arrived only once it completes a frame)."""
    whole = _events(FrameDecoder(max_frame_size=2048, accept_server_frames=True), data, [])
    pieces = _events(FrameDecoder(max_frame_size=2048, accept_server_frames=True), data, chunks)
    assert pieces == whole
