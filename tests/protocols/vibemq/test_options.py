"""createQueue options (vibemq.md §8, §12), priorities (§10) and the spec enumerations."""

from __future__ import annotations

import pytest

from brokers.protocols.vibemq import (
    SERVER_SHUTDOWN,
    WEBSOCKET_PATH,
    WEBSOCKET_SUBPROTOCOL,
    WS_CLOSE_BINARY_FRAME,
    WS_CLOSE_INVALID_PAYLOAD,
    WS_CLOSE_TOO_BIG,
    CreateQueue,
    DeadLetterReason,
    DeliveryMode,
    ErrorCode,
    InvalidMessage,
    InvalidQueue,
    OverflowStrategy,
    Priority,
    Publish,
    QueueOptions,
    dead_letter_queue_name,
    is_valid_queue_name,
    parse_queue_options,
)


def options(queue: str = "orders", **headers: str) -> QueueOptions:
    return parse_queue_options(CreateQueue(id="c1", queue=queue, headers=headers))


def test_defaults() -> None:
    parsed = options()
    assert parsed == QueueOptions()
    assert parsed.delivery_mode is DeliveryMode.ROUND_ROBIN
    assert parsed.max_queue_size == 10000
    assert parsed.message_ttl is None
    assert parsed.enable_dead_letter_queue is False
    assert parsed.max_retry_attempts == 3
    assert parsed.overflow_strategy is OverflowStrategy.DROP_OLDEST
    assert dead_letter_queue_name("orders", parsed) == "orders.dlq"


@pytest.mark.parametrize(
    ("value", "mode"),
    [
        ("RoundRobin", DeliveryMode.ROUND_ROBIN),
        ("fanoutwithack", DeliveryMode.FAN_OUT_WITH_ACK),
        ("FANOUTWITHOUTACK", DeliveryMode.FAN_OUT_WITHOUT_ACK),
        ("PriorityBased", DeliveryMode.PRIORITY_BASED),
        ("0", DeliveryMode.ROUND_ROBIN),
        ("1", DeliveryMode.FAN_OUT_WITH_ACK),
        ("2", DeliveryMode.FAN_OUT_WITHOUT_ACK),
        ("3", DeliveryMode.PRIORITY_BASED),
    ],
)
def test_delivery_mode(value: str, mode: DeliveryMode) -> None:
    assert options(deliveryMode=value).delivery_mode is mode


@pytest.mark.parametrize(
    ("value", "strategy"),
    [
        ("DropOldest", OverflowStrategy.DROP_OLDEST),
        ("dropnewest", OverflowStrategy.DROP_NEWEST),
        ("BlockPublisher", OverflowStrategy.BLOCK_PUBLISHER),
        ("3", OverflowStrategy.REDIRECT_TO_DLQ),
    ],
)
def test_overflow_strategy(value: str, strategy: OverflowStrategy) -> None:
    assert options(overflowStrategy=value).overflow_strategy is strategy


def test_redirect_to_dlq_enables_the_dlq() -> None:
    parsed = options(overflowStrategy="RedirectToDlq")
    assert parsed.enable_dead_letter_queue is True


def test_numeric_limits_accepted() -> None:
    assert options(maxQueueSize="1").max_queue_size == 1
    assert options(maxQueueSize="10000000").max_queue_size == 10_000_000
    assert options(messageTtl="1").message_ttl == 1
    assert options(maxRetryAttempts="0").max_retry_attempts == 0
    assert options(maxRetryAttempts="100").max_retry_attempts == 100
    assert options(enableDeadLetterQueue="TRUE").enable_dead_letter_queue is True
    assert options(enableDeadLetterQueue="false").enable_dead_letter_queue is False


@pytest.mark.parametrize(
    ("header", "value"),
    [
        ("deliveryMode", "Broadcast"),
        ("deliveryMode", "4"),
        ("deliveryMode", ""),
        ("overflowStrategy", "Reject"),
        ("maxQueueSize", "0"),
        ("maxQueueSize", "10000001"),
        ("maxQueueSize", "-5"),
        ("maxQueueSize", "1e3"),
        ("maxQueueSize", " 10"),
        ("maxQueueSize", "9" * 30),
        ("messageTtl", "0"),
        ("messageTtl", "abc"),
        ("messageTtl", "٣"),
        ("maxRetryAttempts", "101"),
        ("enableDeadLetterQueue", "yes"),
        ("enableDeadLetterQueue", "1"),
    ],
)
def test_invalid_option_names_the_header(header: str, value: str) -> None:
    with pytest.raises(InvalidMessage) as caught:
        options(**{header: value})
    assert header in str(caught.value)
    assert caught.value.request_id == "c1"
    assert caught.value.error_code is ErrorCode.INVALID_MESSAGE


def test_custom_dead_letter_queue_name() -> None:
    parsed = options(deadLetterQueueName="failed-orders", enableDeadLetterQueue="true")
    assert dead_letter_queue_name("orders", parsed) == "failed-orders"
    with pytest.raises(InvalidQueue):
        options(deadLetterQueueName="bad name")


def test_default_dlq_name_must_fit_the_name_limit() -> None:
    assert options("q" * 252, enableDeadLetterQueue="true").enable_dead_letter_queue
    with pytest.raises(InvalidQueue) as caught:
        options("q" * 253, enableDeadLetterQueue="true")
    assert caught.value.request_id == "c1"
    assert options("q" * 253).enable_dead_letter_queue is False
    assert options(
        "q" * 253, deadLetterQueueName="short", overflowStrategy="3"
    ).enable_dead_letter_queue


@pytest.mark.parametrize(
    ("value", "priority"),
    [
        (None, Priority.NORMAL),
        ("Low", Priority.LOW),
        ("normal", Priority.NORMAL),
        ("HIGH", Priority.HIGH),
        ("critical", Priority.CRITICAL),
        ("0", Priority.LOW),
        ("3", Priority.CRITICAL),
        ("urgent", Priority.NORMAL),
        ("4", Priority.NORMAL),
        ("", Priority.NORMAL),
    ],
)
def test_priority(value: str | None, priority: Priority) -> None:
    headers = {} if value is None else {"priority": value}
    assert Publish(id="m", queue="q", headers=headers).priority is priority


def test_enumeration_values() -> None:
    assert [m.value for m in DeliveryMode] == [
        "RoundRobin",
        "FanOutWithAck",
        "FanOutWithoutAck",
        "PriorityBased",
    ]
    assert [m.code for m in DeliveryMode] == [0, 1, 2, 3]
    assert [m.value for m in OverflowStrategy] == [
        "DropOldest",
        "DropNewest",
        "BlockPublisher",
        "RedirectToDlq",
    ]
    assert [int(p) for p in Priority] == [0, 1, 2, 3]
    assert {r.value for r in DeadLetterReason} == {
        "MaxRetriesExceeded",
        "MessageExpired",
        "QueueOverflow",
    }
    assert {c.value for c in ErrorCode} == {
        "AUTH_REQUIRED",
        "AUTH_FAILED",
        "NOT_AUTHENTICATED",
        "INVALID_MESSAGE",
        "INVALID_QUEUE",
        "QUEUE_NOT_FOUND",
        "QUEUE_EXISTS",
        "QUEUE_FULL",
        "FORBIDDEN",
        "RATE_LIMITED",
        "CONNECTION_LIMIT",
        "UNKNOWN_COMMAND",
        "SERVER_ERROR",
    }


def test_websocket_constants() -> None:
    assert (WEBSOCKET_PATH, WEBSOCKET_SUBPROTOCOL) == ("/ws/vibemq", "vibemq")
    assert (WS_CLOSE_BINARY_FRAME, WS_CLOSE_INVALID_PAYLOAD, WS_CLOSE_TOO_BIG) == (1003, 1007, 1009)
    assert SERVER_SHUTDOWN == "server_shutdown"


def test_queue_name_helper() -> None:
    assert is_valid_queue_name("orders.dlq")
    assert not is_valid_queue_name("zakazy-заказы")
