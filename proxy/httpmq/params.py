"""HTTP-MQ parameters: query string and form body to one ``{name: value}``, validated.

Sans-IO: bytes in, a dict out. Parameters come as a query string or as form fields
(``application/x-www-form-urlencoded``, and ``multipart/form-data`` as browsers and
``curl -F`` send it; file parts are ignored) and the form wins; a name given twice keeps
its last value. More than :data:`MAX_PARAMS` names is a 400, counted before anything is
decoded, so a form of thousands of fields costs nothing.
"""

from __future__ import annotations

from urllib.parse import unquote

from python_multipart.exceptions import FormParserError
from python_multipart.multipart import MultipartParser, parse_options_header

from proxy.httpmq.envelope import bad_parameter

MAX_PARAMS = 64
FORM = b"application/x-www-form-urlencoded"
MULTIPART = b"multipart/form-data"


def _too_many() -> Exception:
    return bad_parameter(f"too many parameters (at most {MAX_PARAMS})")


def parse_urlencoded(data: bytes, into: dict[str, str]) -> None:
    """Add the fields of a query string or url-encoded form to ``into``."""
    if not data:
        return
    if data.count(b"&") >= MAX_PARAMS * 2:
        raise _too_many()
    text = data.decode("latin-1") if data.isascii() else data.decode("utf-8", "surrogateescape")
    # urllib's parse_qsl(keep_blank_values=True), without its cost for fields that need no
    # unquoting (most of them: this runs for every request)
    for pair in text.split("&"):
        if not pair:
            continue
        name, _, value = pair.partition("=")
        if "%" in pair or "+" in pair:
            name = unquote(name.replace("+", " "), errors="surrogateescape")
            value = unquote(value.replace("+", " "), errors="surrogateescape")
        into[name] = value
    if len(into) > MAX_PARAMS:
        raise _too_many()


def parse_multipart(body: bytes, content_type: bytes, into: dict[str, str]) -> None:
    """Add the non-file fields of a ``multipart/form-data`` body to ``into``."""
    _, options = parse_options_header(content_type)
    boundary = options.get(b"boundary")
    if not boundary:
        raise bad_parameter("multipart/form-data without a boundary")
    fields: list[tuple[str | None, bytearray]] = []
    headers: dict[bytes, bytes] = {}
    current: dict[str, bytes] = {"field": b"", "value": b""}

    def on_part_begin() -> None:
        headers.clear()
        if len(fields) >= MAX_PARAMS * 2:
            raise _too_many()

    def on_header_field(data: bytes, start: int, end: int) -> None:
        current["field"] += data[start:end]

    def on_header_value(data: bytes, start: int, end: int) -> None:
        current["value"] += data[start:end]

    def on_header_end() -> None:
        headers[current["field"].lower()] = current["value"]
        current["field"] = current["value"] = b""

    def on_headers_finished() -> None:
        _, disposition = parse_options_header(headers.get(b"content-disposition", b""))
        name = disposition.get(b"name")
        is_file = b"filename" in disposition or name is None
        fields.append((None if is_file else name.decode("utf-8", "replace"), bytearray()))

    def on_part_data(data: bytes, start: int, end: int) -> None:
        if fields and fields[-1][0] is not None:
            fields[-1][1].extend(data[start:end])

    parser = MultipartParser(
        boundary,
        {
            "on_part_begin": on_part_begin,
            "on_header_field": on_header_field,
            "on_header_value": on_header_value,
            "on_header_end": on_header_end,
            "on_headers_finished": on_headers_finished,
            "on_part_data": on_part_data,
        },
    )
    try:
        parser.write(body)
        parser.finalize()
    except FormParserError:
        raise bad_parameter("malformed multipart/form-data body") from None
    for name, value in fields:
        if name is not None:
            into[name] = value.decode("utf-8", "surrogateescape")
    if len(into) > MAX_PARAMS:
        raise _too_many()


def collect(method: str, query: bytes, content_type: bytes, body: bytes) -> dict[str, str]:
    """Query parameters merged with the form fields of a POST (the form wins).

    Bytes that are not UTF-8 are kept as lone surrogates (``surrogateescape``), never
    replaced by U+FFFD: ``message`` is a body, bytes whatever they are (:func:`body_bytes`
    gets them back); any other parameter holding them is a 400, as it names or describes
    something in text."""
    params: dict[str, str] = {}
    parse_urlencoded(query, params)
    if method == "POST" and body:
        kind = content_type.split(b";", 1)[0].strip().lower()
        if kind == FORM:
            parse_urlencoded(body, params)
        elif kind == MULTIPART:
            parse_multipart(body, content_type, params)
    for name, value in params.items():
        if not value.isascii() and name not in RAW_PARAMS and _escaped(value):
            raise bad_parameter(f"{name} is not UTF-8 text")
    return params


RAW_PARAMS = frozenset({"message"})
"""Parameters whose value is a message body: any bytes."""


def _escaped(text: str) -> bool:
    """Whether ``text`` holds bytes that were not UTF-8 (or a name that was not)."""
    return any(0xD800 <= ord(c) <= 0xDFFF for c in text)


def body_bytes(text: str) -> bytes:
    """The bytes a ``message`` parameter carried, as sent (see :func:`collect`)."""
    return text.encode("utf-8", "surrogateescape")


def required(params: dict[str, str], name: str) -> str:
    """A parameter that must be present and non-empty."""
    value = params.get(name, "")
    if not value:
        raise bad_parameter(f"{name} is required")
    return value


def integer(params: dict[str, str], name: str, low: int, high: int) -> int | None:
    """An optional integer parameter within [low, high]."""
    raw = params.get(name, "")
    if raw == "":
        return None
    try:
        value = int(raw)
    except ValueError:
        raise bad_parameter(f"{name} must be an integer") from None
    if not low <= value <= high:
        raise bad_parameter(f"{name} must be between {low} and {high}")
    return value


def boolean(params: dict[str, str], name: str) -> bool:
    """An optional true/false (1/0) parameter."""
    raw = params.get(name, "").lower()
    if raw in ("", "false", "0"):
        return False
    if raw in ("true", "1"):
        return True
    raise bad_parameter(f"{name} must be true or false")
