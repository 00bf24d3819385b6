"""``\\uXXXX`` escapes of lone UTF-16 surrogates in JSON text (sans-IO, shared by codecs).

RFC 8259's grammar lets a string hold ``"\\ud800"``, but that is no Unicode text: no
UTF-8 body, header or id can carry it (I-JSON, RFC 7493, forbids it), and msgspec refuses
such a document with a wrong message ("Input data was truncated"). Codecs find these
escapes here to say what is wrong — in which field or element.
"""

from __future__ import annotations

import re

_ESCAPE = re.compile(
    rb"\\(?:u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}"  # a pair: kept
    rb"|(u[dD][89a-fA-F][0-9a-fA-F]{2})"  # a lone surrogate
    rb"|.)",  # any other escape (an escaped backslash among them), kept
    re.DOTALL,
)


def replace_lone_surrogates(data: bytes, stand_in: bytes) -> tuple[bytes, bytes | None]:
    """``data`` with each ``\\uXXXX`` escape of a lone UTF-16 surrogate replaced by
    ``stand_in``, and the first such escape (None: there is none)."""
    first: list[bytes] = []

    def replace(match: re.Match[bytes]) -> bytes:
        if match.group(1) is None:
            return match.group(0)
        if not first:
            first.append(match.group(0))
        return stand_in

    replaced = _ESCAPE.sub(replace, data)
    return replaced, (first[0] if first else None)


def first_lone_surrogate(data: bytes) -> bytes | None:
    """The first ``\\uXXXX`` escape of a lone UTF-16 surrogate in ``data`` (None: none)."""
    for match in _ESCAPE.finditer(data):
        if match.group(1) is not None:
            return match.group(0)
    return None
