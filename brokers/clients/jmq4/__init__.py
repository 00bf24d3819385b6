"""Python asyncio client for JMQ4: :class:`Jmq4Client` (producer, consumer, transactions)
over :class:`Jmq4Connection`, and a CLI (``python -m brokers.clients.jmq4``)."""

from brokers.clients.jmq4.client import Jmq4Client, TopicMetadata, Transaction
from brokers.clients.jmq4.connection import Jmq4Connection, Jmq4Error
from brokers.clients.jmq4.messages import (
    OutgoingMessage,
    ReceivedMessage,
    build_batch,
    build_message,
    expand,
)

__all__ = [
    "Jmq4Client",
    "Jmq4Connection",
    "Jmq4Error",
    "OutgoingMessage",
    "ReceivedMessage",
    "TopicMetadata",
    "Transaction",
    "build_batch",
    "build_message",
    "expand",
]
