"""The HTTP-MQ ``requestId``: URL-safe Base64 of ``broker,queue,offset,next,lockTime,force``.

Sans-IO: strings in, a typed value out, and back (http-mq.md §3.3). The encoder always
writes all six fields with ``=`` padding; the decoder accepts input with or without
padding and a missing sixth field (false).
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass

MAX_LENGTH = 512
LARGEST = 2**53 - 1
"""The largest magnitude of a requestId's numbers: offsets and lock times the engine's
scripts hold exactly (Lua numbers are doubles). A larger ``nextOffset`` once committed
as −2^63 and left its queue redelivering one batch for good."""


class InvalidRequestId(ValueError):
    """The requestId cannot be decoded (HTTP 400 ``INVALID_REQUEST_ID``)."""


@dataclass(frozen=True, slots=True)
class RequestId:
    """Which batch of which queue a consumer holds, and under which lock."""

    broker: str
    queue: int
    offset: int
    next_offset: int
    lock_time: int
    force_ack: bool = False

    def encode(self) -> str:
        """The wire form."""
        text = (
            f"{self.broker},{self.queue},{self.offset},{self.next_offset},{self.lock_time},"
            f"{'true' if self.force_ack else 'false'}"
        )
        return base64.urlsafe_b64encode(text.encode("ascii")).decode("ascii")

    @property
    def ack_info(self) -> str:
        """The log form ``broker-queue:offset,next,lockTime,force``."""
        return (
            f"{self.broker}-{self.queue}:{self.offset},{self.next_offset},{self.lock_time},"
            f"{'true' if self.force_ack else 'false'}"
        )

    @classmethod
    def decode(cls, value: str) -> RequestId:
        """Parse a requestId; :class:`InvalidRequestId` when it is not one."""
        if not value or len(value) > MAX_LENGTH:
            raise InvalidRequestId("requestId is empty or too long")
        try:
            raw = base64.urlsafe_b64decode(value + "=" * (-len(value) % 4))
            text = raw.decode("ascii")
        except (binascii.Error, ValueError, UnicodeDecodeError):
            raise InvalidRequestId("requestId is not URL-safe Base64 of ASCII") from None
        parts = text.split(",")
        if len(parts) not in (5, 6):
            raise InvalidRequestId("requestId must have 5 or 6 comma-separated fields")
        try:
            queue, offset, next_offset, lock_time = (int(p) for p in parts[1:5])
        except ValueError:
            raise InvalidRequestId(
                "requestId queue, offsets and lockTime must be integers"
            ) from None
        if max(abs(queue), abs(offset), abs(next_offset), abs(lock_time)) > LARGEST:
            raise InvalidRequestId(
                f"requestId queue, offsets and lockTime must be within ±{LARGEST}"
            )
        force = parts[5] if len(parts) == 6 else "false"
        if force not in ("true", "false"):
            raise InvalidRequestId("requestId forceAck must be true or false")
        return cls(parts[0], queue, offset, next_offset, lock_time, force == "true")
