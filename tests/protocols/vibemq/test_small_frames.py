"""Frames of up to 2 kB are decoded in one pass (brokers.protocols.vibemq.codec._small);
whatever they hold, the frame or the error is exactly what the field-by-field path gives."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from brokers.protocols.vibemq import ProtocolError, codec, decode_json

_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.text(max_size=8),
    st.sampled_from(["publish", "ack", "PING", "subscribe", "deliver", "error", "q1", "a b"]),
    st.text(min_size=250, max_size=300),
    st.lists(st.integers(), max_size=3),
)
_HEADERS = st.one_of(
    st.none(),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=6), _VALUES, max_size=4),
    st.dictionaries(st.text(min_size=1, max_size=3), st.text(max_size=3), min_size=60, max_size=70),
)
_FIELDS = st.fixed_dictionaries(
    {},
    optional={
        "id": _VALUES,
        "type": _VALUES,
        "queue": _VALUES,
        "payload": _VALUES,
        "headers": _HEADERS,
        "errorCode": _VALUES,
        "errorMessage": _VALUES,
        "extra": _VALUES,
    },
)


def _outcome(data: bytes | str) -> object:
    try:
        frame = decode_json(data)
    except ProtocolError as exc:
        return (type(exc), str(exc), exc.request_id)
    return (type(frame), frame)


def _careful(data: bytes | str, monkeypatch: pytest.MonkeyPatch) -> object:
    with monkeypatch.context() as m:
        m.setattr(codec, "_small", lambda _: None)
        return _outcome(data)


@settings(max_examples=400, deadline=None)
@given(fields=_FIELDS, as_text=st.booleans())
def test_one_pass_agrees_with_field_by_field(fields, as_text) -> None:
    data = json.dumps(fields, ensure_ascii=False).encode()
    frame = data.decode() if as_text else data
    with pytest.MonkeyPatch.context() as monkeypatch:
        assert _outcome(frame) == _careful(frame, monkeypatch)


@settings(max_examples=200, deadline=None)
@given(data=st.binary(max_size=64) | st.sampled_from([b'{"id": "1", "type": "ping"', b"[]", b"{}"]))
def test_one_pass_agrees_on_any_bytes(data: bytes) -> None:
    with pytest.MonkeyPatch.context() as monkeypatch:
        assert _outcome(data) == _careful(data, monkeypatch)
