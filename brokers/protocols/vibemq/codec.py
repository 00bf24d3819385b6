"""One VibeMQ JSON text ⇄ one typed frame (vibemq.md §1–§4, §13).

:func:`decode_json` is what a WebSocket text frame goes through directly and what the TCP
stream decoder applies to each length-prefixed body. Checks run in this order, the first
failure raising: UTF-8 → JSON object (both close the connection; a JSON object but for a
string holding a lone UTF-16 surrogate escape is ``INVALID_MESSAGE`` echoing its id, the
connection open) → ``id`` → ``type`` → ``queue`` → ``headers`` → ``encoding``. Unknown
fields are ignored. On output, absent (``None``) fields and empty ``headers`` are omitted,
keys come in the spec's order and ``schemaVersion`` is ``"1.0"``.

``encoding`` (:data:`~brokers.protocols.vibemq.frames.BASE64`, a broker extension) is read
on ``publish`` and ``deliver``: the payload is then a base64 string, decoded to the body's
bytes, and anything else there is ``INVALID_MESSAGE``.
"""

from __future__ import annotations

import base64
import binascii
import struct
from collections.abc import Sequence
from typing import Any

import msgspec

from brokers.protocols.json_escapes import replace_lone_surrogates
from brokers.protocols.vibemq.enums import SERVER_ONLY_TYPES, CommandType
from brokers.protocols.vibemq.errors import (
    EncodeError,
    InvalidJson,
    InvalidMessage,
    InvalidUtf8,
    UnknownCommand,
)
from brokers.protocols.vibemq.frames import BASE64, FRAME_CLASSES, Frame
from brokers.protocols.vibemq.validation import MAX_HEADERS, check_headers, check_queue, valid_id

SCHEMA_VERSION = "1.0"
MAX_FRAME_SIZE = 1_048_576
"""Default maximum body length of one frame (§1)."""
LENGTH_PREFIX = struct.Struct(">I")

QUEUE_REQUIRED = frozenset(
    {
        CommandType.PUBLISH,
        CommandType.SUBSCRIBE,
        CommandType.UNSUBSCRIBE,
        CommandType.DELIVER,
        CommandType.CREATE_QUEUE,
        CommandType.DELETE_QUEUE,
        CommandType.QUEUE_INFO,
    }
)
_NO_PAYLOAD = (msgspec.Raw(), msgspec.Raw(b"null"))
_FIELDS_OF = {
    kind: tuple(
        name in cls.__struct_fields__ for name in ("queue", "headers", "payload", "encoding")
    )
    for kind, cls in FRAME_CLASSES.items()
}
"""Frame type → whether its class has a ``queue``, ``headers``, ``payload`` and
``encoding`` field."""


class _Envelope(msgspec.Struct, rename="camel"):
    """Every field of §2 as its raw JSON text, so that validation can report precise errors
    and a hostile frame cannot make the broker build a large object tree out of a field
    (``"headers": [[], [], …]`` of a megabyte): each field is decoded only within a size
    that a valid value can take (:func:`_field`)."""

    id: msgspec.Raw = msgspec.Raw()
    type: msgspec.Raw = msgspec.Raw()
    queue: msgspec.Raw = msgspec.Raw()
    payload: msgspec.Raw = msgspec.Raw()
    encoding: msgspec.Raw = msgspec.Raw()
    headers: msgspec.Raw = msgspec.Raw()
    error_code: msgspec.Raw = msgspec.Raw()
    error_message: msgspec.Raw = msgspec.Raw()


SHORT_FIELD_BYTES = 2048  # id, type, queue, errorCode: 256 characters, \u-escaped, fit
LONG_FIELD_BYTES = 65_536  # errorMessage and each header value (4096 characters escaped)
_TOO_LARGE = "\ufffd" * (LONG_FIELD_BYTES + 1)
"""What a field too large to be valid reads as: a string longer than any limit, so the
field's check reports it as too long (or not a valid name) without decoding it."""
_HEADERS = msgspec.json.Decoder(dict[str, msgspec.Raw])


def _field(raw: msgspec.Raw, limit: int) -> Any:
    """``raw`` decoded (None when absent), or :data:`_TOO_LARGE` past ``limit`` bytes."""
    if not raw:
        return None
    if len(raw) > limit:
        return _TOO_LARGE
    try:
        return msgspec.json.decode(raw)
    except msgspec.DecodeError as exc:  # e.g. a number out of range
        raise InvalidJson(f"frame is not a JSON object: {exc}") from None


def _headers(raw: msgspec.Raw) -> Any:
    """The headers object with each value decoded within its size (see :func:`_field`)."""
    if not raw or bytes(raw) == b"null":
        return None
    try:
        found = _HEADERS.decode(raw)
    except msgspec.ValidationError:  # not an object: let check_headers say so
        return []
    except msgspec.DecodeError as exc:
        raise InvalidJson(f"frame is not a JSON object: {exc}") from None
    if len(found) > MAX_HEADERS:
        return found  # refused by its count
    return {key: _field(value, LONG_FIELD_BYTES) for key, value in found.items()}


class _Wire(msgspec.Struct, omit_defaults=True, rename="camel"):
    """The output shape: spec key order, ``None`` fields omitted."""

    id: str | None = None
    type: str = ""
    queue: str | None = None
    payload: Any = None
    encoding: str | None = None
    headers: dict[str, str] | None = None
    error_code: str | None = None
    error_message: str | None = None
    schema_version: str = ""


class _Small(msgspec.Struct, rename="camel"):
    """The fields of a frame of at most :data:`SHORT_FIELD_BYTES` (acks, most publishes),
    decoded in one pass when they have the types a valid frame's have: no field of it can
    pass a size limit, so what :func:`_field` would make of each is its plain value."""

    id: str | None = None
    type: str | None = None
    queue: str | None = None
    payload: msgspec.Raw = msgspec.Raw()
    encoding: str | None = None
    headers: dict[str, str] | None = None
    error_code: str | None = None
    error_message: str | None = None


_DECODER = msgspec.json.Decoder(_Envelope)
_SMALL = msgspec.json.Decoder(_Small)
_ENCODER = msgspec.json.Encoder()


def _envelope(data: bytes | str) -> _Envelope:
    try:
        if isinstance(data, str):
            data = data.encode()
        else:
            data.decode()
    except UnicodeError:
        raise InvalidUtf8("frame is not valid UTF-8") from None
    try:
        return _DECODER.decode(data)
    except msgspec.DecodeError as exc:
        return _without_lone_surrogates(data, exc)
    except RecursionError:  # valid JSON, perhaps, but past what the decoder may recurse
        raise InvalidJson("frame nests arrays or objects too deeply (hundreds of levels)") from None


def _without_lone_surrogates(data: bytes, exc: msgspec.DecodeError) -> _Envelope:
    """The envelope of a frame the decoder refused with ``exc``, when that was for lone
    UTF-16 surrogate escapes (``"\\ud800"``) in fields the broker ignores (unknown ones);
    else the error to raise.

    Such a string is allowed by the RFC 8259 grammar, but it is no Unicode text: no UTF-8
    body, header or id can hold it (I-JSON, RFC 7493, forbids it), and the decoder's own
    message for it ("Input data was truncated") is wrong. In a field of §2 it is
    :class:`InvalidMessage` naming the field, the connection open, the id echoed unless
    it holds one. The text is read with two stand-ins for the escapes: a field holding
    one reads differently. Any other refusal is :class:`InvalidJson`, with the error of
    the text without those escapes."""
    one, escape = replace_lone_surrogates(data, b"\\ufffd")
    if escape is None:
        raise InvalidJson(f"frame is not a JSON object: {exc}")
    try:
        env = _DECODER.decode(one)
        other = _DECODER.decode(replace_lone_surrogates(data, b"\\ufffc")[0])
    except msgspec.DecodeError as other_exc:
        raise InvalidJson(f"frame is not a JSON object: {other_exc}") from None
    except RecursionError:
        raise InvalidJson(f"frame is not a JSON object: {exc}") from None
    fields = [name for name in env.__struct_fields__ if getattr(env, name) != getattr(other, name)]
    if not fields:
        return env
    rid = None if "id" in fields else valid_id(_field(env.id, SHORT_FIELD_BYTES))
    name = env.__struct_encode_fields__[env.__struct_fields__.index(fields[0])]
    raise InvalidMessage(
        f"{name} holds a lone UTF-16 surrogate {escape.decode('ascii')}: "
        "no UTF-8 text can carry it",
        request_id=rid,
    )


def _binary_payload(encoding: Any, payload: msgspec.Raw, rid: str | None) -> bytes:
    """The body bytes of a frame with an ``encoding`` field (see :data:`BASE64`)."""
    if encoding != BASE64:
        raise InvalidMessage(
            f"encoding must be {BASE64!r} (a base64 payload) or absent", request_id=rid
        )
    try:
        text = msgspec.json.decode(payload, type=str) if payload else None
    except msgspec.DecodeError:
        text = None
    if text is None:
        raise InvalidMessage("encoding base64 needs a payload string", request_id=rid)
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidMessage("payload is not base64 (encoding base64)", request_id=rid) from None


def _small(data: bytes | str) -> _Small | None:
    """A frame of at most :data:`SHORT_FIELD_BYTES` decoded in one pass, or None: larger,
    not UTF-8, or anything unusual (a field of another type, not JSON), which the field by
    field path then decodes and reports exactly as it always did."""
    try:
        raw = data.encode() if isinstance(data, str) else data
        if len(raw) > SHORT_FIELD_BYTES:
            return None
        if raw is data:  # bytes off the wire: UTF-8 is checked before JSON (§1's order)
            raw.decode()
        return _SMALL.decode(raw)
    except (UnicodeError, msgspec.DecodeError, RecursionError):
        return None


def decode_json(data: bytes | str, *, accept_server_frames: bool = False) -> Frame:
    """Decode and validate one frame's JSON text; raises a :class:`ProtocolError` subclass.

    By default this is the broker's view: server-only types are ``UNKNOWN_COMMAND``. A client
    (or a test) passes ``accept_server_frames=True`` to read the broker's frames, where the
    shutdown ``disconnect`` may lack an id.
    """
    small = _small(data)
    if small is not None:
        rid, type_, queue_ = valid_id(small.id), small.type, small.queue
        headers_ = small.headers
        payload, code, text = small.payload, small.error_code, small.error_message
        encoding_: Any = small.encoding
    else:  # field by field, each within its size, for precise errors
        env = _envelope(data)
        rid = valid_id(_field(env.id, SHORT_FIELD_BYTES))
        type_ = _field(env.type, SHORT_FIELD_BYTES)
        queue_ = _field(env.queue, SHORT_FIELD_BYTES)
        headers_ = _headers(env.headers)
        payload = env.payload
        encoding_ = env.encoding or None  # decoded below, for the frames that have it
        code = _field(env.error_code, SHORT_FIELD_BYTES)
        text = _field(env.error_message, LONG_FIELD_BYTES)
    kind = CommandType.parse(type_)
    if rid is None and not (accept_server_frames and kind is CommandType.DISCONNECT):
        raise InvalidMessage("id must be a string of 1-256 characters")
    if type_ is None:
        raise InvalidMessage("type missing", request_id=rid)
    if kind is None or (kind in SERVER_ONLY_TYPES and not accept_server_frames):
        raise UnknownCommand(f"unknown command type {str(type_)[:64]!r}", request_id=rid)
    cls = FRAME_CLASSES[kind]
    has_queue, has_headers, has_payload, has_encoding = _FIELDS_OF[kind]
    fields: dict[str, Any] = {"id": rid}
    if queue_ is not None or kind in QUEUE_REQUIRED:
        queue = check_queue(queue_, rid)
        if has_queue:
            fields["queue"] = queue
    headers = check_headers(headers_, rid)
    if has_headers:
        fields["headers"] = headers
    if has_encoding and isinstance(encoding_, msgspec.Raw):
        encoding_ = _field(encoding_, SHORT_FIELD_BYTES)
    if has_encoding and encoding_ is not None:
        fields["payload"] = _binary_payload(encoding_, payload, rid)
        fields["encoding"] = BASE64
    elif has_payload and payload not in _NO_PAYLOAD:
        fields["payload"] = payload
    if kind is CommandType.ERROR:
        if not isinstance(code, str) or not isinstance(text, str | None):
            raise InvalidMessage("errorCode / errorMessage must be strings", request_id=rid)
        fields["error_code"] = code
        fields["error_message"] = text or ""
    return cls(**fields)


def encode_json(frame: Frame) -> bytes:
    """The frame as compact UTF-8 JSON, e.g. for a WebSocket text frame (``.decode()`` it)."""
    wire = _Wire(
        id=frame.id,
        type=frame.TYPE.value,
        queue=getattr(frame, "queue", None),
        payload=getattr(frame, "payload", None),
        encoding=getattr(frame, "encoding", None),
        headers=getattr(frame, "headers", None) or None,
        error_code=getattr(frame, "error_code", None),
        error_message=getattr(frame, "error_message", None),
        schema_version=SCHEMA_VERSION,
    )
    try:
        return _ENCODER.encode(wire)
    except (msgspec.EncodeError, TypeError, ValueError, OverflowError) as exc:
        raise EncodeError(f"cannot encode {frame.TYPE.value} frame: {exc}") from None


_DELIVER_HEAD = b'{"id":'
_DELIVER_QUEUE = b',"type":"' + CommandType.DELIVER.value.encode() + b'","queue":'
_DELIVER_TAIL = b',"schemaVersion":' + msgspec.json.encode(SCHEMA_VERSION) + b"}"


def encode_deliver(
    message_id: str,
    queue: str,
    payload: Any,
    headers: dict[str, str],
    encoding: str | None = None,
) -> bytes:
    """``encode_json(Deliver(id=message_id, queue=queue, payload=payload, headers=headers,
    encoding=encoding))``, the same bytes written in one pass: a server writes one per
    message delivered."""
    encode = _ENCODER.encode
    try:
        payload_json = None if payload is None else encode(payload)
        headers_json = encode(headers) if headers else None
    except (msgspec.EncodeError, TypeError, ValueError, OverflowError) as exc:
        raise EncodeError(f"cannot encode deliver frame: {exc}") from None
    return encode_deliver_json(message_id, queue, payload_json, headers_json, encoding)


def encode_deliver_json(
    message_id: str,
    queue: str,
    payload_json: bytes | None,
    headers_json: bytes | None,
    encoding: str | None = None,
) -> bytes:
    """:func:`encode_deliver` of a payload and headers already JSON text (None: left
    out) — a server that keeps the JSON of a producer's recurring headers writes the
    frame so. The caller vouches for the two texts (valid JSON, headers an object of
    strings)."""
    encode = _ENCODER.encode
    try:
        parts = [_DELIVER_HEAD, encode(message_id), _DELIVER_QUEUE, encode(queue)]
        if encoding is not None:
            encoding_json = encode(encoding)
    except (msgspec.EncodeError, TypeError, ValueError, OverflowError) as exc:
        raise EncodeError(f"cannot encode deliver frame: {exc}") from None
    if payload_json is not None:
        parts += (b',"payload":', payload_json)
    if encoding is not None:
        parts += (b',"encoding":', encoding_json)
    if headers_json is not None:
        parts += (b',"headers":', headers_json)
    parts.append(_DELIVER_TAIL)
    return b"".join(parts)


def with_length(body: bytes) -> bytes:
    """A frame's JSON (:func:`encode_json`) as TCP bytes: the 4-byte length, then the JSON."""
    if len(body) > 0xFFFFFFFF:
        raise EncodeError("frame longer than a 32-bit length prefix allows")
    return LENGTH_PREFIX.pack(len(body)) + body


def with_lengths(bodies: Sequence[bytes]) -> bytes:
    """:func:`with_length` of each of ``bodies``, one after the other, as one bytes (a
    server writes a dispatch round's deliveries so)."""
    pack = LENGTH_PREFIX.pack
    parts: list[bytes] = []
    for body in bodies:
        if len(body) > 0xFFFFFFFF:
            raise EncodeError("frame longer than a 32-bit length prefix allows")
        parts += (pack(len(body)), body)
    return b"".join(parts)


def encode_frame(frame: Frame) -> bytes:
    """The frame as TCP bytes: 4-byte big-endian length, then the JSON (§1)."""
    return with_length(encode_json(frame))
