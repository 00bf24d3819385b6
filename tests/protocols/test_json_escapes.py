"""Escapes of lone UTF-16 surrogates in JSON text (brokers/protocols/json_escapes.py)."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from brokers.protocols.json_escapes import first_lone_surrogate, replace_lone_surrogates


def test_lone_escapes_are_found_and_pairs_and_escaped_backslashes_are_not():
    assert first_lone_surrogate(rb'["a\ud800b"]') == rb"\ud800"
    assert first_lone_surrogate(rb'["\uDC00"]') == rb"\uDC00"
    assert first_lone_surrogate(rb'["\ud83d\ude00"]') is None  # a pair: one character
    assert first_lone_surrogate(rb'["\\ud800"]') is None  # a backslash, then text
    assert first_lone_surrogate(rb'["\ud83d\ud83d"]') == rb"\ud83d"  # two highs: lone
    assert replace_lone_surrogates(rb'["x\udfff"]', b"?") == (b'["x?"]', rb"\udfff")


@given(st.text())
def test_json_of_any_text_holds_no_lone_surrogate(text):
    """What a JSON encoder writes for real text (ASCII-escaped: pairs for the astral
    planes) is never taken for a lone surrogate."""
    assert first_lone_surrogate(json.dumps(text).encode()) is None
