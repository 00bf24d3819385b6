"""The one-pass ``deliver`` encoder (a server writes one per message delivered) writes the
bytes the generic encoder writes for the same frame, whatever the id, queue, payload and
headers hold."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from brokers.protocols.vibemq import (
    Deliver,
    EncodeError,
    decode_json,
    encode_deliver,
    encode_frame,
    encode_json,
    with_length,
)

_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)
_PAYLOADS = st.one_of(
    st.none(),
    st.text(max_size=40),  # a UTF-8 body delivered as a JSON string
    _JSON.filter(lambda v: v is not None).map(lambda v: msgspec.Raw(msgspec.json.encode(v))),
    _JSON,
)
_HEADERS = st.dictionaries(st.text(min_size=1, max_size=12), st.text(max_size=20), max_size=5)


@settings(max_examples=300, deadline=None)
@given(
    message_id=st.text(min_size=1, max_size=40),
    queue=st.from_regex(r"[A-Za-z0-9._-]{1,20}", fullmatch=True),
    payload=_PAYLOADS,
    headers=_HEADERS,
)
def test_same_bytes_as_the_generic_encoder(message_id, queue, payload, headers) -> None:
    frame = Deliver(id=message_id, queue=queue, payload=payload, headers=headers)
    body = encode_deliver(message_id, queue, payload, headers)
    assert body == encode_json(frame)
    assert with_length(body) == encode_frame(frame)
    back = decode_json(body, accept_server_frames=True)
    assert isinstance(back, Deliver)
    assert (back.id, back.queue, back.headers) == (message_id, queue, headers)


def test_a_payload_json_cannot_hold_is_an_encode_error() -> None:
    with pytest.raises(EncodeError):
        encode_deliver("m1", "q", object(), {})


@settings(max_examples=100, deadline=None)
@given(body=st.binary(max_size=40), headers=_HEADERS)
def test_a_binary_body_goes_as_base64_beside_untouched_headers(body, headers) -> None:
    """``encoding`` is a field of the frame, not a header: the publisher's headers (an
    ``encoding`` of their own among them) come back as they were, and the payload as the
    body's bytes."""
    frame = Deliver(id="m", queue="q", payload=body, headers=headers, encoding="base64")
    encoded = encode_deliver("m", "q", body, headers, "base64")
    assert encoded == encode_json(frame)
    assert decode_json(encoded, accept_server_frames=True) == frame
