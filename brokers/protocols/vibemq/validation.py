"""Field validation limits of vibemq.md §13 (lengths counted in Unicode code points).

Each ``check_*`` takes the raw JSON value and returns it typed, or raises the error §13 names;
``request_id`` is attached so the server can echo it.
"""

from __future__ import annotations

import re

from brokers.protocols.vibemq.errors import InvalidMessage, InvalidQueue

MAX_ID_LENGTH = 256
MAX_QUEUE_NAME_LENGTH = 256
MAX_HEADERS = 50
MAX_HEADER_KEY_LENGTH = 256
MAX_HEADER_VALUE_LENGTH = 4096
_QUEUE_NAME = re.compile(rf"[A-Za-z0-9._-]{{1,{MAX_QUEUE_NAME_LENGTH}}}")


def valid_id(value: object) -> str | None:
    """``value`` if it is a usable frame id (a string of 1–256 characters), else ``None``."""
    if isinstance(value, str) and 1 <= len(value) <= MAX_ID_LENGTH:
        return value
    return None


def is_valid_queue_name(name: str) -> bool:
    """1–256 characters from ``[A-Za-z0-9._-]`` (ASCII only)."""
    return _QUEUE_NAME.fullmatch(name) is not None


def check_queue(value: object, request_id: str | None) -> str:
    """A queue name, or :class:`InvalidQueue` (missing, empty, not a string, bad syntax)."""
    if not isinstance(value, str) or not value:
        raise InvalidQueue("queue name missing", request_id=request_id)
    if not is_valid_queue_name(value):
        raise InvalidQueue(f"invalid queue name {value[:64]!r}", request_id=request_id)
    return value


def check_headers(value: object, request_id: str | None) -> dict[str, str]:
    """String→string headers within the §13 limits (``None`` means none), else InvalidMessage."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InvalidMessage("headers must be an object", request_id=request_id)
    if len(value) > MAX_HEADERS:
        raise InvalidMessage(
            f"{len(value)} headers, at most {MAX_HEADERS} allowed", request_id=request_id
        )
    for key, item in value.items():
        if not 1 <= len(key) <= MAX_HEADER_KEY_LENGTH:
            raise InvalidMessage(
                f"header name must be 1-{MAX_HEADER_KEY_LENGTH} characters", request_id=request_id
            )
        if not isinstance(item, str):
            raise InvalidMessage(f"header {key[:64]!r} must be a string", request_id=request_id)
        if len(item) > MAX_HEADER_VALUE_LENGTH:
            raise InvalidMessage(
                f"header {key[:64]!r} longer than {MAX_HEADER_VALUE_LENGTH} characters",
                request_id=request_id,
            )
    return value
