"""Protocol detection for a port shared with other protocols (spec §2.3).

A JMQ4 connection starts with a frame whose first 8 bytes are ``length`` (≥ 23) followed by
the magic ``CA FE BE BE``.
"""

from __future__ import annotations

from brokers.protocols.jmq4.header import MAGIC_BYTES, REQUEST_HEADER_SIZE

DETECT_BYTES = 8


def detect_jmq4(prefix: bytes) -> bool | None:
    """``True``/``False`` once the first bytes decide it, ``None`` while more are needed.

    Fewer than 8 bytes give ``False`` early when they already contradict JMQ4.
    """
    if len(prefix) >= 4 and int.from_bytes(prefix[:4], "big", signed=True) < REQUEST_HEADER_SIZE:
        return False
    magic = bytes(prefix[4:DETECT_BYTES])
    if magic != MAGIC_BYTES[: len(magic)]:
        return False
    return True if len(prefix) >= DETECT_BYTES else None
