"""Stored records as response messages: the bytes go out exactly as the engine stored them.

The engine's record layout is the JMQ4 BrokerMessage layout (spec §3), so a fetch response
never decodes or re-encodes a message: :class:`StoredMessage` hands the codec the stored
bytes, which it copies into the frame (``write_message_item`` calls ``write``).
"""

from __future__ import annotations

from brokers.protocols.jmq4 import Writer


class StoredMessage:
    """A stored record standing in for a BrokerMessage in a response payload."""

    __slots__ = ("raw",)

    def __init__(self, raw: bytes) -> None:
        self.raw = raw

    def to_bytes(self) -> bytes:
        """The stored bytes."""
        return self.raw

    def write(self, w: Writer) -> None:
        """Copy the stored bytes into the frame."""
        w.write_raw(self.raw)
