"""Typed VibeMQ frames (vibemq.md §2–§8), one msgspec Struct per ``type``.

Attribute names are snake_case; ``rename="camel"`` maps them to the spec's JSON names
(``errorCode``, ``messageCount``, …). Each frame keeps only the fields its type uses.
``payload`` is opaque: on decoded frames it is a :class:`msgspec.Raw` holding the JSON bytes
exactly as received (so a published payload is delivered verbatim), or ``None`` when absent
or null; frames built by a server may hold any msgspec-encodable value instead.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, ClassVar

import msgspec

from brokers.protocols.vibemq.enums import (
    CommandType,
    DeliveryMode,
    Header,
    OverflowStrategy,
    Priority,
)


class _Frame(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    TYPE: ClassVar[CommandType]


class Connect(_Frame):
    """C→S. ``headers.authToken`` (an mqcloud app token) and ``headers.clientVersion``."""

    TYPE = CommandType.CONNECT
    id: str
    headers: dict[str, str] = msgspec.field(default_factory=dict)

    @property
    def auth_token(self) -> str | None:
        """``headers.authToken``; missing or empty means AUTH_REQUIRED when auth is on."""
        return self.headers.get(Header.AUTH_TOKEN)

    @property
    def client_version(self) -> str | None:
        """``headers.clientVersion``."""
        return self.headers.get(Header.CLIENT_VERSION)


class ConnectAck(_Frame):
    """S→C. ``headers.serverVersion`` and ``headers.connectionId``."""

    TYPE = CommandType.CONNECT_ACK
    id: str
    headers: dict[str, str] = msgspec.field(default_factory=dict)


class Disconnect(_Frame):
    """Both ways. The broker's shutdown notice has no id and ``headers.reason``."""

    TYPE = CommandType.DISCONNECT
    id: str | None = None
    headers: dict[str, str] = msgspec.field(default_factory=dict)


class Ping(_Frame):
    """C→S keep-alive; allowed before ``connect``."""

    TYPE = CommandType.PING
    id: str


class Pong(_Frame):
    """S→C reply to ``ping``, same id."""

    TYPE = CommandType.PONG
    id: str


BASE64 = "base64"
"""The one value of the broker's ``encoding`` field (a broker extension, not in vibemq.md):
the frame's ``payload`` is a JSON string holding the base64 of the message's body bytes.
It is a top-level field, beside the payload it describes, so it never shares the
namespace of the publisher's ``headers`` (which travel untouched); a spec client ignores
it as an unknown field. Decoded, such a frame's ``payload`` is the body as ``bytes``
(which msgspec writes back as base64)."""


class Publish(_Frame):
    """C→S. ``id`` is also the message id; ``headers`` are stored and delivered.
    ``encoding`` :data:`BASE64`: ``payload`` is the body's bytes (a binary body)."""

    TYPE = CommandType.PUBLISH
    id: str
    queue: str
    payload: Any = None
    encoding: str | None = None
    headers: dict[str, str] = msgspec.field(default_factory=dict)

    @property
    def priority(self) -> Priority:
        """``headers.priority`` parsed per §10 (Normal when missing or unknown)."""
        return Priority.parse(self.headers.get(Header.PRIORITY))


class PublishAck(_Frame):
    """S→C. ``headers.messageId``, ``headers.queueName``, maybe ``dropped``/``deadLettered``."""

    TYPE = CommandType.PUBLISH_ACK
    id: str
    queue: str | None = None
    headers: dict[str, str] = msgspec.field(default_factory=dict)


class Subscribe(_Frame):
    """C→S."""

    TYPE = CommandType.SUBSCRIBE
    id: str
    queue: str


class SubscribeAck(_Frame):
    """S→C. ``headers.queueName`` and ``headers.subscriptionId``."""

    TYPE = CommandType.SUBSCRIBE_ACK
    id: str
    queue: str | None = None
    headers: dict[str, str] = msgspec.field(default_factory=dict)


class Unsubscribe(_Frame):
    """C→S."""

    TYPE = CommandType.UNSUBSCRIBE
    id: str
    queue: str


class UnsubscribeAck(_Frame):
    """S→C. ``headers.queueName``."""

    TYPE = CommandType.UNSUBSCRIBE_ACK
    id: str
    queue: str | None = None
    headers: dict[str, str] = msgspec.field(default_factory=dict)


class Deliver(_Frame):
    """S→C. ``id`` is the message id; publisher headers plus ``deliveryAttempts``.
    ``encoding`` :data:`BASE64`: the body is not UTF-8 and ``payload`` is its bytes."""

    TYPE = CommandType.DELIVER
    id: str
    queue: str
    payload: Any = None
    encoding: str | None = None
    headers: dict[str, str] = msgspec.field(default_factory=dict)


class Ack(_Frame):
    """C→S, no reply. Acknowledges ``headers.messageId``, or ``id`` in the original form."""

    TYPE = CommandType.ACK
    id: str
    headers: dict[str, str] = msgspec.field(default_factory=dict)

    @property
    def message_id(self) -> str:
        """The acknowledged message id (§7)."""
        return self.headers.get(Header.MESSAGE_ID, self.id)


class CreateQueue(_Frame):
    """C→S with option ``headers``; the reply carries the queueInfo object as ``payload``."""

    TYPE = CommandType.CREATE_QUEUE
    id: str
    queue: str
    payload: Any = None
    headers: dict[str, str] = msgspec.field(default_factory=dict)


class DeleteQueue(_Frame):
    """C→S, and the reply."""

    TYPE = CommandType.DELETE_QUEUE
    id: str
    queue: str


class QueueInfo(_Frame):
    """C→S, and the reply with a :class:`QueueInfoPayload` as ``payload``."""

    TYPE = CommandType.QUEUE_INFO
    id: str
    queue: str
    payload: Any = None


class ListQueues(_Frame):
    """C→S, and the reply with the sorted queue names as ``payload``."""

    TYPE = CommandType.LIST_QUEUES
    id: str
    payload: Any = None


class Error(_Frame):
    """S→C. ``id`` echoes the offending frame's id, or is fresh (§4)."""

    TYPE = CommandType.ERROR
    id: str
    error_code: str
    error_message: str = ""


Frame = (
    Connect
    | ConnectAck
    | Disconnect
    | Ping
    | Pong
    | Publish
    | PublishAck
    | Subscribe
    | SubscribeAck
    | Unsubscribe
    | UnsubscribeAck
    | Deliver
    | Ack
    | CreateQueue
    | DeleteQueue
    | QueueInfo
    | ListQueues
    | Error
)

FRAME_CLASSES: dict[CommandType, type[Frame]] = {
    cls.TYPE: cls
    for cls in (
        Connect,
        ConnectAck,
        Disconnect,
        Ping,
        Pong,
        Publish,
        PublishAck,
        Subscribe,
        SubscribeAck,
        Unsubscribe,
        UnsubscribeAck,
        Deliver,
        Ack,
        CreateQueue,
        DeleteQueue,
        QueueInfo,
        ListQueues,
        Error,
    )
}


class QueueInfoPayload(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """The queueInfo object (§8): documented fields, then the broker's additions."""

    name: str
    message_count: int
    subscriber_count: int
    delivery_mode: DeliveryMode
    max_size: int
    created_at: datetime
    in_flight_count: int = 0
    message_ttl: int | None = None
    enable_dead_letter_queue: bool = False
    dead_letter_queue_name: str | None = None
    max_retry_attempts: int = 3
    overflow_strategy: OverflowStrategy = OverflowStrategy.DROP_OLDEST
