"""``createQueue`` options (vibemq.md §8, §12): header strings → typed :class:`QueueOptions`.

Integers are plain ASCII decimal digits; booleans are ``true``/``false`` in any case; enum
options accept names in any case or their code. An invalid value raises
:class:`InvalidMessage` naming the header; an invalid or over-long dead-letter queue name
raises :class:`InvalidQueue`.
"""

from __future__ import annotations

from typing import TypeVar

import msgspec

from brokers.protocols.vibemq.enums import DeliveryMode, Header, OverflowStrategy
from brokers.protocols.vibemq.errors import InvalidMessage, InvalidQueue
from brokers.protocols.vibemq.frames import CreateQueue
from brokers.protocols.vibemq.validation import is_valid_queue_name

DEFAULT_MAX_QUEUE_SIZE = 10_000
MAX_MAX_QUEUE_SIZE = 10_000_000
DEFAULT_MAX_RETRY_ATTEMPTS = 3
MAX_MAX_RETRY_ATTEMPTS = 100
DLQ_SUFFIX = ".dlq"


class QueueOptions(msgspec.Struct, frozen=True, kw_only=True):
    """A queue's settings; the defaults are those of auto-created queues."""

    delivery_mode: DeliveryMode = DeliveryMode.ROUND_ROBIN
    max_queue_size: int = DEFAULT_MAX_QUEUE_SIZE
    message_ttl: int | None = None
    """Milliseconds from acceptance; ``None``: no TTL."""
    enable_dead_letter_queue: bool = False
    max_retry_attempts: int = DEFAULT_MAX_RETRY_ATTEMPTS
    overflow_strategy: OverflowStrategy = OverflowStrategy.DROP_OLDEST
    dead_letter_queue_name: str | None = None
    """``None`` means ``<queue>.dlq``; see :func:`dead_letter_queue_name`."""


def dead_letter_queue_name(queue: str, options: QueueOptions) -> str:
    """The DLQ of ``queue``: the configured name or ``<queue>.dlq``."""
    return options.dead_letter_queue_name or queue + DLQ_SUFFIX


def _invalid(name: str, value: str, rid: str) -> InvalidMessage:
    return InvalidMessage(f"invalid {name}: {value[:64]!r}", request_id=rid)


def _integer(headers: dict[str, str], name: str, low: int, high: int, rid: str) -> int | None:
    value = headers.get(name)
    if value is None:
        return None
    if not (value.isascii() and value.isdigit()) or len(value) > 19:
        raise _invalid(name, value, rid)
    if not low <= int(value) <= high:
        raise _invalid(name, value, rid)
    return int(value)


_E = TypeVar("_E", DeliveryMode, OverflowStrategy)


def _named(headers: dict[str, str], name: str, enum: type[_E], default: _E, rid: str) -> _E:
    value = headers.get(name)
    if value is None:
        return default
    parsed = enum.parse(value)
    if parsed is None:
        raise _invalid(name, value, rid)
    return parsed


def parse_queue_options(frame: CreateQueue) -> QueueOptions:
    """Validate the option headers of a ``createQueue`` request."""
    headers, rid = frame.headers, frame.id
    mode = _named(headers, Header.DELIVERY_MODE, DeliveryMode, DeliveryMode.ROUND_ROBIN, rid)
    overflow = _named(
        headers, Header.OVERFLOW_STRATEGY, OverflowStrategy, OverflowStrategy.DROP_OLDEST, rid
    )
    dlq = headers.get(Header.ENABLE_DEAD_LETTER_QUEUE, "false")
    if dlq.lower() not in ("true", "false"):
        raise _invalid(Header.ENABLE_DEAD_LETTER_QUEUE, dlq, rid)
    size = _integer(headers, Header.MAX_QUEUE_SIZE, 1, MAX_MAX_QUEUE_SIZE, rid)
    retries = _integer(headers, Header.MAX_RETRY_ATTEMPTS, 0, MAX_MAX_RETRY_ATTEMPTS, rid)
    dlq_name = headers.get(Header.DEAD_LETTER_QUEUE_NAME)
    if dlq_name is not None and not is_valid_queue_name(dlq_name):
        raise InvalidQueue(
            f"invalid {Header.DEAD_LETTER_QUEUE_NAME}: {dlq_name[:64]!r}", request_id=rid
        )
    options = QueueOptions(
        delivery_mode=mode,
        max_queue_size=DEFAULT_MAX_QUEUE_SIZE if size is None else size,
        message_ttl=_integer(headers, Header.MESSAGE_TTL, 1, 2**63 - 1, rid),
        enable_dead_letter_queue=dlq.lower() == "true"
        or overflow is OverflowStrategy.REDIRECT_TO_DLQ,
        max_retry_attempts=DEFAULT_MAX_RETRY_ATTEMPTS if retries is None else retries,
        overflow_strategy=overflow,
        dead_letter_queue_name=dlq_name,
    )
    default_dlq = dead_letter_queue_name(frame.queue, options)
    if options.enable_dead_letter_queue and not is_valid_queue_name(default_dlq):
        raise InvalidQueue(f"dead-letter queue name {default_dlq[:64]!r} too long", request_id=rid)
    return options
