"""The ``create_mq`` admin body and the broker's MQ-name rule (zbus.md §11.2).

Body: ``{"mqName": …, "accessToken": …, "mqMode": …}``, ``mqMode`` a number or a decimal
string. Errors carry the exact 5.x reasons (``Missing mq_name filed`` included). Checks run in
the 5.x order: JSON, then ``mqMode``, then ``mqName``. A missing ``mqMode`` means 0 (a plain
queue, §7) and a missing ``accessToken`` means no token.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass

import msgspec

from brokers.protocols.zbus.constants import MqMode
from brokers.protocols.zbus.errors import CreateMqError
from brokers.protocols.zbus.message import parse_int32

MAX_MQ_NAME_BYTES = 255
_FORBIDDEN = frozenset("/?&=%")


@dataclass(frozen=True, slots=True)
class CreateMq:
    """A valid ``create_mq`` request."""

    name: str
    access_token: str
    mode: MqMode


def is_valid_mq_name(name: str) -> bool:
    """1–255 bytes of UTF-8 without whitespace, control characters, ``/ ? & = %``."""
    if not name or len(name.encode("utf-8", "surrogatepass")) > MAX_MQ_NAME_BYTES:
        return False
    return not any(
        ch.isspace() or ch in _FORBIDDEN or unicodedata.category(ch) in ("Cc", "Cs") for ch in name
    )


def _mode(value: object) -> MqMode:
    if value is None:
        return MqMode(0)
    number = None
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, str):
        number = parse_int32(value)
    if number is None or not 0 <= number < 2**31:
        raise CreateMqError("mqMode invalid")
    return MqMode(number)


def parse_create_mq(body: bytes) -> CreateMq:
    """Parse and validate a ``create_mq`` body; raises :class:`CreateMqError`."""
    try:
        params = msgspec.json.decode(body)
    except (msgspec.DecodeError, RecursionError):
        raise CreateMqError("register param json body invalid") from None
    if not isinstance(params, dict):
        raise CreateMqError("register param json body invalid")
    mode = _mode(params.get("mqMode"))
    name = params.get("mqName")
    token = params.get("accessToken")
    if name is None:
        raise CreateMqError("Missing mq_name filed")
    if not isinstance(name, str) or not is_valid_mq_name(name):
        raise CreateMqError("mqName invalid")
    if token is not None and not isinstance(token, str):
        raise CreateMqError("register param json body invalid")
    return CreateMq(name=name, access_token=token or "", mode=mode)
