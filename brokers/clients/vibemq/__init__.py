"""Python asyncio client for VibeMQ over TCP: :class:`VibeMQClient`."""

from brokers.clients.vibemq.client import (
    ConnectionClosed,
    Received,
    VibeMQClient,
    VibeMQServerError,
)

__all__ = ["ConnectionClosed", "Received", "VibeMQClient", "VibeMQServerError"]
