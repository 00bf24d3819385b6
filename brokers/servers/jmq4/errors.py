"""Errors a handler raises to answer with a BooleanAck, and the engine-error → code mapping."""

from __future__ import annotations

from brokers.engine import EngineError
from brokers.protocols.jmq4 import Code

_CODES = frozenset(int(c) for c in Code)


class Reject(Exception):
    """Answer the request with a BooleanAck carrying ``code`` (a §7 code ≤ 255)."""

    def __init__(self, code: int, text: str = "") -> None:
        super().__init__(text or f"code {code}")
        self.code = code if code in _CODES and code <= 255 else Code.CN_UNKNOWN_ERROR
        self.text = text


def wire_code(code: int) -> int:
    """``code`` if it is a §7 code, otherwise 4 (unknown error): nothing else goes out."""
    return code if code in _CODES else Code.CN_UNKNOWN_ERROR


def engine_code(exc: EngineError) -> int:
    """The §7 code of an engine error."""
    return wire_code(exc.jmq4_code)
