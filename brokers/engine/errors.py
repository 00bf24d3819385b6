"""Typed errors of the engine; each front-end maps them to its own wire errors.

Every error carries a stable machine-readable ``code`` (an upper-case name); a front-end
maps the error class (or that code) to its protocol's error. Redis being unreachable
surfaces as :class:`StoreUnavailable`.
"""

from __future__ import annotations


class EngineError(Exception):
    """Base class of every error the engine raises on purpose."""

    code = "INTERNAL_ERROR"

    def __init__(self, message: str = "") -> None:
        super().__init__(message or self.__class__.__name__)
        self.message = message or self.__class__.__name__


class StoreUnavailable(EngineError):
    """Redis could not be reached or did not answer."""

    code = "UNAVAILABLE"


class TopicNotFound(EngineError):
    """The topic is not in the catalog snapshot."""

    code = "TOPIC_NOT_FOUND"


class PartitionNotFound(EngineError):
    """The partition number is not one of the topic's partitions."""

    code = "BAD_PARAMETER"


class AccessDenied(EngineError):
    """The engine's gate refused the app (:mod:`brokers.engine.access`): every front-end
    answers its own "forbidden" (JMQ4 status 1 or the specific code below, zbus 403,
    VibeMQ ``FORBIDDEN``, HTTP-MQ 403); nothing was stored or delivered."""

    code = "FORBIDDEN"


class ProducerNotFound(AccessDenied):
    """The app has no producer policy on the topic."""

    code = "PRODUCER_NOT_FOUND"


class ConsumerNotFound(AccessDenied):
    """The app has no consumer policy on the topic."""

    code = "CONSUMER_NOT_FOUND"


class ClientNotAllowed(AccessDenied):
    """The client address is on the producer policy's blacklist."""

    code = "FORBIDDEN"


class ConsumerClientNotAllowed(AccessDenied):
    """The client address is on the consumer policy's blacklist."""

    code = "FORBIDDEN"


class RateLimited(EngineError):
    """The policy's rate limit (messages per second, cluster-wide) is used up; nothing
    was stored or delivered. ``retry_after_ms``: when permits are there again."""

    code = "RATE_LIMITED"

    def __init__(self, message: str = "", retry_after_ms: int = 1000) -> None:
        super().__init__(message)
        self.retry_after_ms = max(1, int(retry_after_ms))


class InvalidMessage(EngineError):
    """A message or request argument is malformed."""

    code = "BAD_PARAMETER"


class MessageTooLarge(InvalidMessage):
    """The body is over the engine's size limit."""

    code = "MESSAGE_TOO_LARGE"


class NoWritablePartition(EngineError):
    """No partition of the topic has a writable, alive leader."""

    code = "UNAVAILABLE"


class BrokerNotWritable(EngineError):
    """The explicit partition's leader broker is not writable or not alive."""

    code = "UNAVAILABLE"


class BrokerNotLeader(EngineError):
    """An append made as the partition's leader by a broker that no longer leads it (its
    catalog is stale: failover moved the group while it was paused or cut off)."""

    code = "UNAVAILABLE"
    jmq4_code = 188


class IndexOutOfRange(EngineError):
    """A read index lies outside ``[min, max]`` of the partition."""

    code = "OFFSET_ILLEGAL"

    def __init__(self, index: int, min_index: int, max_index: int) -> None:
        super().__init__(f"index {index} outside [{min_index}, {max_index}]")
        self.index, self.min_index, self.max_index = index, min_index, max_index


class AckRejected(EngineError):
    """Acked indexes are not one contiguous run without duplicates (JMQ4 code 140)."""

    code = "BAD_PARAMETER"


class ConsumerPaused(EngineError):
    """The consumer is paused: nothing is delivered to it until it is resumed (a read
    that cannot answer with an empty result raises this)."""

    code = "PAUSED"


class ClientIdRequired(EngineError):
    """A broadcast consumer must name its client id."""

    code = "CLIENT_ID_REQUIRED"


class ClientIdNotAllowed(EngineError):
    """A clustering consumer must not name a client id."""

    code = "CLIENT_ID_NOT_ALLOWED"


class TransactionNotFound(EngineError):
    """The transaction id is unknown, committed, rolled back or swept."""

    code = "BAD_PARAMETER"


class TransactionLimit(EngineError):
    """Too many open transactions for the (topic, app)."""

    code = "RATE_LIMITED"


class QueueFull(EngineError):
    """A BlockPublisher queue is at its max size; the message was not stored."""

    code = "QUEUE_FULL"


class WriteTimeout(EngineError):
    """The write is stored, but the requested durability was not confirmed in time."""

    code = "SEND_PENDING"


class DelayedMessagesBusy(EngineError):
    """A topic's delayed messages are being moved into its partitions (by a mover that
    has not let go in time); cancelling them must wait. Nothing was changed."""

    code = "BUSY"


class SpanTooLarge(EngineError):
    """A re-consume names more messages than one may copy; nothing was copied."""

    code = "SPAN_TOO_LARGE"
