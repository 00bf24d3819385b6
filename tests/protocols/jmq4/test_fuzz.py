"""Fuzzing the decoder: only the codec's typed events may come out, never an exception.

The main test pushes FUZZ_FRAMES generated frames (mutations of valid frames with a correct
length prefix, random payloads behind a valid header, and raw noise) through FrameDecoder,
deterministically seeded. Two smaller hypothesis tests add shrinking-friendly coverage.
"""

from __future__ import annotations

import random
import struct
from collections import Counter
from functools import cache

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from brokers.protocols import jmq4
from tests.protocols.jmq4.strategies import frames
from tests.protocols.jmq4.test_vectors import FRAME_VECTORS

FUZZ_FRAMES = 100_000
FUZZ_SEED = 0x4A4D5134
CORPUS_SIZE = 300
EVENT_TYPES = (jmq4.Frame, jmq4.MalformedFrame, jmq4.UnknownCommand, jmq4.FatalError)
INTERESTING = (0x00, 0x01, 0x7F, 0x80, 0xFF, 0xFE)


@cache
def corpus() -> tuple[bytes, ...]:
    """Valid frames: the reference vectors plus a deterministic sample of every type."""
    collected = [vector.data for vector in FRAME_VECTORS]

    @settings(
        max_examples=CORPUS_SIZE,
        derandomize=True,
        database=None,
        deadline=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(frame=frames())
    def collect(frame: jmq4.Frame) -> None:
        collected.append(frame.encode())

    collect()
    return tuple(collected)


def with_length(body: bytes) -> bytes:
    """Prefix ``body`` (everything after the length field) with its correct frame length."""
    return struct.pack(">i", len(body) + 4) + body


def mutate(rng: random.Random, frame: bytes) -> bytes:
    """Apply 1–4 random edits to a valid frame and fix its length prefix."""
    body = bytearray(frame[4:])
    # Mostly keep magic and version intact so the payload decoders are exercised.
    low = 0 if rng.random() < 0.1 else 5
    for _ in range(rng.randint(1, 4)):
        if len(body) <= low:
            body += rng.randbytes(rng.randint(1, 8))
            continue
        pos = rng.randrange(low, len(body))
        op = rng.randrange(6)
        if op == 0:
            body[pos] ^= 1 << rng.randrange(8)
        elif op == 1:
            body[pos] = rng.choice(INTERESTING)
        elif op == 2:
            body[pos:pos] = rng.randbytes(rng.randint(1, 8))
        elif op == 3:
            del body[pos : pos + rng.randint(1, 8)]
        elif op == 4:
            del body[pos:]
        else:
            end = min(len(body), pos + rng.randint(1, 16))
            body[pos:pos] = body[pos:end]
    return with_length(bytes(body))


def random_payload(rng: random.Random) -> bytes:
    """A valid request or response header of any type followed by random bytes."""
    identity = rng.randrange(8)
    fixed = struct.pack(
        ">IbBibq",
        jmq4.header.MAGIC,
        rng.randint(1, 4),
        identity,
        rng.randint(-(2**31), 2**31 - 1),
        rng.randint(-128, 127),
        rng.randint(0, 2**62),
    )
    return with_length(fixed + rng.randbytes(rng.randint(0, 48)))


def generate(rng: random.Random, frames_: tuple[bytes, ...]) -> bytes:
    roll = rng.random()
    if roll < 0.70:
        return mutate(rng, rng.choice(frames_))
    if roll < 0.80:
        return rng.choice(frames_)
    if roll < 0.95:
        return random_payload(rng)
    return rng.randbytes(rng.randint(0, 40))


def check_event(event: object) -> None:
    """Every event is a codec event; decoded frames re-encode idempotently."""
    assert isinstance(event, EVENT_TYPES), event
    if isinstance(event, jmq4.Frame):
        try:
            encoded = event.encode()
        except jmq4.EncodeError:
            return  # e.g. a status or code outside §7, which the broker never sends
        assert jmq4.decode_frame(encoded).encode() == encoded


def test_decoder_survives_generated_frames() -> None:
    rng = random.Random(FUZZ_SEED)
    frames_ = corpus()
    decoder = jmq4.FrameDecoder(max_frame_size=1 << 16)
    counts: Counter[str] = Counter()
    generated = 0
    for _ in range(FUZZ_FRAMES):
        data = generate(rng, frames_)
        generated += 1
        cut = rng.randint(0, len(data)) if rng.random() < 0.2 else len(data)
        for chunk in (data[:cut], data[cut:]):
            decoder.feed(chunk)
            for event in decoder:
                check_event(event)
                counts[type(event).__name__] += 1
        if decoder.failed:
            decoder = jmq4.FrameDecoder(max_frame_size=1 << 16)
    assert generated == FUZZ_FRAMES
    assert sum(counts.values()) > FUZZ_FRAMES * 0.8
    assert set(counts) == {cls.__name__ for cls in EVENT_TYPES}, counts
    assert counts["Frame"] > FUZZ_FRAMES // 10
    assert counts["MalformedFrame"] > FUZZ_FRAMES // 10


@settings(max_examples=500, deadline=None)
@given(chunks=st.lists(st.binary(max_size=64), max_size=8))
def test_decoder_survives_random_bytes(chunks: list[bytes]) -> None:
    decoder = jmq4.FrameDecoder()
    for chunk in chunks:
        decoder.feed(chunk)
        for event in decoder:
            check_event(event)


@settings(max_examples=300, deadline=None)
@given(frame=frames(), seed=st.integers(0, 2**32 - 1))
def test_decoder_survives_mutated_frames(frame: jmq4.Frame, seed: int) -> None:
    rng = random.Random(seed)
    data = mutate(rng, frame.encode())
    decoder = jmq4.FrameDecoder()
    decoder.feed(data)
    (event,) = decoder  # a correct length prefix always yields exactly one event
    check_event(event)
    assert decoder.buffered == 0
