"""The REST API's JSON body parser: DRF's, plus the two inputs it lets through to a 500.

DRF's ``JSONParser`` answers malformed JSON with a 400, but a body nested about a
thousand levels deep raises ``RecursionError`` from the standard library's decoder, and a
lone surrogate (``"\\ud800"``) decodes into a ``str`` that no response can encode — a
field that echoes it in its error (a choice field) then fails while rendering. Both are
refused here with the same 400 ``parse_error`` body as any other malformed JSON.
"""

from __future__ import annotations

from typing import Any

from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser

MAX_DEPTH = 64
"""Deepest nesting of arrays and objects a request body may have (the API's own bodies
nest at most four levels)."""


def _problem(data: Any) -> str | None:
    """Why ``data`` (parsed JSON) is refused, or None; iterative, so any depth is safe."""
    stack: list[tuple[Any, int]] = [(data, 0)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, str):
            if not value.isascii() and any(0xD800 <= ord(c) <= 0xDFFF for c in value):
                return "a string holds a lone surrogate (\\ud800-\\udfff), which is not text"
        elif isinstance(value, dict | list):
            if depth >= MAX_DEPTH:
                return f"arrays and objects nested more than {MAX_DEPTH} deep"
            items = value.items() if isinstance(value, dict) else enumerate(value)
            for key, item in items:
                stack.append((key, depth + 1))
                stack.append((item, depth + 1))
    return None


class JSONBodyParser(JSONParser):
    """``JSONParser`` that refuses too-deep nesting and lone surrogates with a 400."""

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        try:
            data = super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise ParseError(
                f"JSON parse error - arrays and objects nested more than {MAX_DEPTH} deep"
            ) from None
        problem = _problem(data)
        if problem:
            raise ParseError(f"JSON parse error - {problem}")
        return data
