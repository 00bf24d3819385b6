"""VibeMQ vocabulary: command types, delivery modes, priorities, overflow policies, error codes.

Names are the spec's (vibemq.md §3, §9, §10, §12, §17); enum values are the strings written on
the wire, and ``code`` gives the numeric form the spec also accepts on input.
"""

from __future__ import annotations

from enum import IntEnum, StrEnum
from typing import Self


class CommandType(StrEnum):
    """Frame ``type`` values, written camelCase (§3)."""

    CONNECT = "connect"
    CONNECT_ACK = "connectAck"
    DISCONNECT = "disconnect"
    PING = "ping"
    PONG = "pong"
    PUBLISH = "publish"
    PUBLISH_ACK = "publishAck"
    SUBSCRIBE = "subscribe"
    SUBSCRIBE_ACK = "subscribeAck"
    UNSUBSCRIBE = "unsubscribe"
    UNSUBSCRIBE_ACK = "unsubscribeAck"
    DELIVER = "deliver"
    ACK = "ack"
    CREATE_QUEUE = "createQueue"
    DELETE_QUEUE = "deleteQueue"
    QUEUE_INFO = "queueInfo"
    LIST_QUEUES = "listQueues"
    ERROR = "error"

    @property
    def code(self) -> int:
        """The integer code of the type (§3)."""
        return _COMMAND_CODES[self]

    @classmethod
    def parse(cls, value: object) -> CommandType | None:
        """A ``type`` read from JSON: a name in any case or an integer code; else ``None``."""
        if isinstance(value, str):
            return _COMMAND_NAMES.get(value.lower())
        if isinstance(value, int) and not isinstance(value, bool):
            return _COMMANDS_BY_CODE.get(value)
        return None


_COMMAND_CODES = dict(
    zip(
        CommandType,
        (0, 1, 2, 10, 11, 20, 21, 22, 23, 24, 25, 26, 30, 40, 41, 42, 43, 99),
        strict=True,
    )
)
_COMMAND_NAMES = {member.value.lower(): member for member in CommandType}
_COMMANDS_BY_CODE = {code: member for member, code in _COMMAND_CODES.items()}

SERVER_ONLY_TYPES = frozenset(
    {
        CommandType.CONNECT_ACK,
        CommandType.PONG,
        CommandType.PUBLISH_ACK,
        CommandType.SUBSCRIBE_ACK,
        CommandType.UNSUBSCRIBE_ACK,
        CommandType.DELIVER,
        CommandType.ERROR,
    }
)
"""Types a client may not send; the broker answers them with ``UNKNOWN_COMMAND`` (§3)."""


class _NamedCode(StrEnum):
    """A spec enumeration written by name and also accepted as its 0-based code."""

    @property
    def code(self) -> int:
        """The numeric code: the member's position in the spec's table."""
        return list(type(self)).index(self)

    @classmethod
    def parse(cls, value: str) -> Self | None:
        """A header value: a name in any case or a one-digit code; ``None`` if neither."""
        lowered = value.lower()
        for code, member in enumerate(cls):
            if lowered in (member.value.lower(), str(code)):
                return member
        return None


class DeliveryMode(_NamedCode):
    """Queue delivery modes (§9.1)."""

    ROUND_ROBIN = "RoundRobin"
    FAN_OUT_WITH_ACK = "FanOutWithAck"
    FAN_OUT_WITHOUT_ACK = "FanOutWithoutAck"
    PRIORITY_BASED = "PriorityBased"


class OverflowStrategy(_NamedCode):
    """What a publish does to a full queue (§9.2)."""

    DROP_OLDEST = "DropOldest"
    DROP_NEWEST = "DropNewest"
    BLOCK_PUBLISHER = "BlockPublisher"
    REDIRECT_TO_DLQ = "RedirectToDlq"


class Priority(IntEnum):
    """Message priority from ``headers.priority`` (§10); higher is dispatched first."""

    LOW = 0
    NORMAL = 1
    HIGH = 2
    CRITICAL = 3

    @classmethod
    def parse(cls, value: str | None) -> Priority:
        """Names in any case or ``"0"``–``"3"``; missing or unknown values mean NORMAL."""
        if value is None:
            return cls.NORMAL
        if value in ("0", "1", "2", "3"):
            return cls(int(value))
        return cls.__members__.get(value.upper(), cls.NORMAL)


class DeadLetterReason(StrEnum):
    """``deadLetterReason`` header values (§12)."""

    MAX_RETRIES_EXCEEDED = "MaxRetriesExceeded"
    MESSAGE_EXPIRED = "MessageExpired"
    QUEUE_OVERFLOW = "QueueOverflow"


class ErrorCode(StrEnum):
    """``errorCode`` values of ``error`` frames (§17)."""

    AUTH_REQUIRED = "AUTH_REQUIRED"
    AUTH_FAILED = "AUTH_FAILED"
    NOT_AUTHENTICATED = "NOT_AUTHENTICATED"
    INVALID_MESSAGE = "INVALID_MESSAGE"
    INVALID_QUEUE = "INVALID_QUEUE"
    QUEUE_NOT_FOUND = "QUEUE_NOT_FOUND"
    QUEUE_EXISTS = "QUEUE_EXISTS"
    QUEUE_FULL = "QUEUE_FULL"
    FORBIDDEN = "FORBIDDEN"
    RATE_LIMITED = "RATE_LIMITED"
    CONNECTION_LIMIT = "CONNECTION_LIMIT"
    UNKNOWN_COMMAND = "UNKNOWN_COMMAND"
    SERVER_ERROR = "SERVER_ERROR"


class Header:
    """Header names the protocol defines (§5–§8, §12); plain strings."""

    AUTH_TOKEN = "authToken"
    CLIENT_VERSION = "clientVersion"
    SERVER_VERSION = "serverVersion"
    CONNECTION_ID = "connectionId"
    REASON = "reason"
    PRIORITY = "priority"
    CORRELATION_ID = "correlationId"
    TIMESTAMP = "timestamp"
    MESSAGE_ID = "messageId"
    QUEUE_NAME = "queueName"
    SUBSCRIPTION_ID = "subscriptionId"
    DELIVERY_ATTEMPTS = "deliveryAttempts"
    DROPPED = "dropped"
    DEAD_LETTERED = "deadLettered"
    DELIVERY_MODE = "deliveryMode"
    MAX_QUEUE_SIZE = "maxQueueSize"
    MESSAGE_TTL = "messageTtl"
    ENABLE_DEAD_LETTER_QUEUE = "enableDeadLetterQueue"
    MAX_RETRY_ATTEMPTS = "maxRetryAttempts"
    OVERFLOW_STRATEGY = "overflowStrategy"
    DEAD_LETTER_QUEUE_NAME = "deadLetterQueueName"
    DEAD_LETTER_REASON = "deadLetterReason"
    ORIGINAL_QUEUE = "originalQueue"
    DEAD_LETTERED_AT = "deadLetteredAt"


SERVER_SHUTDOWN = "server_shutdown"
"""``headers.reason`` of the ``disconnect`` the broker sends on shutdown (§5)."""

WEBSOCKET_PATH = "/ws/vibemq"
WEBSOCKET_SUBPROTOCOL = "vibemq"
"""Optional subprotocol, echoed when offered (§16)."""
WS_CLOSE_BINARY_FRAME = 1003
"""WebSocket close code for a binary frame (§16)."""
WS_CLOSE_INVALID_PAYLOAD = 1007
"""WebSocket close code after the ``INVALID_MESSAGE`` for invalid UTF-8 or JSON (§16)."""
WS_CLOSE_TOO_BIG = 1009
"""WebSocket close code for a message over the size limit (§16)."""
