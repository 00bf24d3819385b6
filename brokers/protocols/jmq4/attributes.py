"""Message attributes as Java ``Properties`` text (spec §3.3).

Encoding writes ``key=value`` lines joined by ``\\n`` (no trailing newline) with the escaping of
``Properties.store``. Decoding accepts the full ``Properties.load`` syntax: ``=``, ``:`` or
whitespace separators, ``#``/``!`` comment lines, blank lines, backslash line continuations,
``\\r``, ``\\n`` or ``\\r\\n`` line ends and ``\\uXXXX`` escapes.
"""

from __future__ import annotations

from collections.abc import Mapping

from brokers.protocols.jmq4.errors import DecodeError

_HEX = "0123456789ABCDEF"
_WHITESPACE = " \t\f"
_SIMPLE_ESCAPES = {"\t": "\\t", "\n": "\\n", "\r": "\\r", "\f": "\\f"}
_UNESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _escape(text: str, *, is_key: bool) -> str:
    out: list[str] = []
    for position, char in enumerate(text):
        code = ord(char)
        if 61 < code < 127:
            out.append("\\\\" if char == "\\" else char)
        elif char == " ":
            out.append("\\ " if is_key or position == 0 else " ")
        elif char in _SIMPLE_ESCAPES:
            out.append(_SIMPLE_ESCAPES[char])
        elif char in "=:#!":
            out.append("\\" + char)
        elif code < 0x20 or code > 0x7E:
            # Java escapes UTF-16 code units, so a supplementary character becomes a pair.
            units = char.encode("utf-16-be", "surrogatepass")
            for i in range(0, len(units), 2):
                unit = (units[i] << 8) | units[i + 1]
                out.append("\\u" + "".join(_HEX[(unit >> s) & 0xF] for s in (12, 8, 4, 0)))
        else:
            out.append(char)
    return "".join(out)


def encode_attributes(attributes: Mapping[str, str] | None) -> str:
    """Render ``attributes`` as Properties text; an empty or missing map gives ``""``."""
    if not attributes:
        return ""
    return "\n".join(
        f"{_escape(key, is_key=True)}={_escape(value, is_key=False)}"
        for key, value in attributes.items()
    )


def _logical_lines(text: str) -> list[str]:
    """Split into logical lines the way ``Properties.LineReader`` does."""
    lines: list[str] = []
    buf: list[str] = []
    skip_whitespace = True
    appended_line_begin = False
    is_new_line = True
    is_comment = False
    preceding_backslash = False
    skip_lf = False
    for char in text:
        if skip_lf:
            skip_lf = False
            if char == "\n":
                continue
        if skip_whitespace:
            if char in _WHITESPACE:
                continue
            if not appended_line_begin and char in "\r\n":
                continue
            skip_whitespace = False
            appended_line_begin = False
        if is_new_line:
            is_new_line = False
            if char in "#!":
                is_comment = True
                continue
        if char not in "\r\n":
            buf.append(char)
            preceding_backslash = not preceding_backslash if char == "\\" else False
            continue
        if is_comment or not buf:
            is_comment = False
            is_new_line = True
            skip_whitespace = True
            buf.clear()
            continue
        if preceding_backslash:
            buf.pop()
            skip_whitespace = True
            appended_line_begin = True
            preceding_backslash = False
            skip_lf = char == "\r"
            continue
        lines.append("".join(buf))
        buf.clear()
        is_new_line = True
        skip_whitespace = True
    if buf and not is_comment:
        if preceding_backslash:
            buf.pop()
        lines.append("".join(buf))
    return lines


def _unescape(text: str) -> str:
    out: list[str] = []
    i = 0
    end = len(text)
    while i < end:
        char = text[i]
        i += 1
        if char != "\\" or i >= end:
            out.append(char)
            continue
        char = text[i]
        i += 1
        if char == "u":
            digits = text[i : i + 4]
            if len(digits) != 4 or any(d not in "0123456789abcdefABCDEF" for d in digits):
                raise DecodeError("malformed \\uxxxx encoding in attributes")
            out.append(chr(int(digits, 16)))
            i += 4
        else:
            out.append(_UNESCAPES.get(char, char))
    joined = "".join(out)
    # \\u escapes produce UTF-16 code units; recombine surrogate pairs into characters.
    return joined.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")


def _split_line(line: str) -> tuple[str, str]:
    limit = len(line)
    key_len = 0
    value_start = limit
    has_separator = False
    preceding_backslash = False
    while key_len < limit:
        char = line[key_len]
        if char in "=:" and not preceding_backslash:
            value_start = key_len + 1
            has_separator = True
            break
        if char in _WHITESPACE and not preceding_backslash:
            value_start = key_len + 1
            break
        preceding_backslash = not preceding_backslash if char == "\\" else False
        key_len += 1
    while value_start < limit:
        char = line[value_start]
        if char not in _WHITESPACE:
            if not has_separator and char in "=:":
                has_separator = True
            else:
                break
        value_start += 1
    return _unescape(line[:key_len]), _unescape(line[value_start:])


def decode_attributes(text: str | None) -> dict[str, str]:
    """Parse Properties text into a dict (later duplicates win, as in Java)."""
    if not text:
        return {}
    return dict(_split_line(line) for line in _logical_lines(text))
