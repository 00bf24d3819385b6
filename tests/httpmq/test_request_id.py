"""The requestId codec (http-mq.md §3.3): the spec example, round trips, bad input."""

from __future__ import annotations

import base64
import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from brokers.engine import java_hash
from proxy.httpmq.request_id import LARGEST, InvalidRequestId, RequestId


def test_spec_example_decodes():
    rid = RequestId.decode("YnJva2VyLWMsNCwyMTU2OSwyMTYwMSwxNjU1ODgyNjM0MDU0")
    assert rid == RequestId("broker-c", 4, 21569, 21601, 1655882634054, False)
    assert rid.ack_info == "broker-c-4:21569,21601,1655882634054,false"


def test_encoder_writes_six_fields_with_padding():
    encoded = RequestId("b", 1, 2, 3, 4, True).encode()
    assert base64.urlsafe_b64decode(encoded) == b"b,1,2,3,4,true"
    assert len(encoded) % 4 == 0


@given(
    broker=st.text(
        alphabet=st.characters(min_codepoint=33, max_codepoint=126, blacklist_characters=","),
        min_size=1,
        max_size=40,
    ),
    queue=st.integers(0, 2**31 - 1),
    offset=st.integers(-LARGEST, LARGEST),
    next_offset=st.integers(-LARGEST, LARGEST),
    lock=st.integers(0, LARGEST),
    force=st.booleans(),
)
def test_round_trip_with_and_without_padding(broker, queue, offset, next_offset, lock, force):
    rid = RequestId(broker, queue, offset, next_offset, lock, force)
    encoded = rid.encode()
    assert RequestId.decode(encoded) == rid
    assert RequestId.decode(encoded.rstrip("=")) == rid


@pytest.mark.parametrize(
    "value",
    [
        "",
        "!!!",
        "x" * 600,
        base64.urlsafe_b64encode(b"a,b,c").decode(),
        base64.urlsafe_b64encode(b"a,1,2,3,x").decode(),
        base64.urlsafe_b64encode(b"a,1,2,3,4,maybe").decode(),
        base64.urlsafe_b64encode("a,1,2,3,4".encode("utf-16")).decode(),
        # numbers past what the engine's scripts hold exactly (a nextOffset of 10^20 was
        # committed as -2^63 and left its queue redelivering one batch for good)
        RequestId("b", 0, 0, 10**20, 1).encode(),
        RequestId("b", 0, 0, LARGEST + 1, 1).encode(),
        RequestId("b", 0, -(LARGEST + 1), 0, 1).encode(),
        RequestId("b", 0, 0, 1, 2**63).encode(),
    ],
)
def test_bad_values_raise(value):
    with pytest.raises(InvalidRequestId):
        RequestId.decode(value)


@given(st.text(max_size=80))
def test_decoder_never_raises_anything_else(value):
    with contextlib.suppress(InvalidRequestId):
        RequestId.decode(value)


# Expected values printed by Java 17's jshell: "…".hashCode() (signed int).
@pytest.mark.parametrize(
    ("text", "expected"),
    [("", 0), ("hello", 99162322), ("order-1", -1207111310), ("é😀x", 61901292)],
)
def test_java_string_hash(text, expected):
    assert java_hash(text) == expected
