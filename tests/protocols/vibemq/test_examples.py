"""Every frame shown in vibemq.md and in seed 004: client frames decoded, server frames encoded."""

from __future__ import annotations

from datetime import UTC, datetime

import msgspec
import pytest

from brokers.protocols.vibemq import (
    SERVER_ONLY_TYPES,
    Ack,
    CommandType,
    Connect,
    CreateQueue,
    DeleteQueue,
    DeliveryMode,
    Disconnect,
    ErrorCode,
    Frame,
    FrameDecoder,
    ListQueues,
    Ping,
    Priority,
    Publish,
    QueueInfo,
    QueueInfoPayload,
    Subscribe,
    Unsubscribe,
    connect_ack,
    decode_json,
    deliver,
    encode_frame,
    encode_json,
    error_frame,
    parse_queue_options,
    pong,
    publish_ack,
    shutdown_notice,
    subscribe_ack,
    unsubscribe_ack,
)


def payload(frame: Frame) -> object:
    raw = getattr(frame, "payload", None)
    return None if raw is None else msgspec.json.decode(raw)


# Client → server, as printed in seed 004


def test_seed_connect() -> None:
    frame = decode_json("""
   {
     "id": "conn_123",
     "type": "connect",
     "headers": {
       "authToken": "my-secret-token",
       "clientVersion": "1.0.0"
     }
   }""")
    assert isinstance(frame, Connect)
    assert frame.id == "conn_123"
    assert frame.auth_token == "my-secret-token"
    assert frame.client_version == "1.0.0"


def test_seed_disconnect() -> None:
    assert decode_json('{"id": "disc_123", "type": "disconnect"}') == Disconnect(id="disc_123")


def test_seed_ping() -> None:
    assert decode_json('{"id": "ping_123", "type": "ping"}') == Ping(id="ping_123")


SEED_PUBLISH = """
   {
     "id": "msg_123",
     "type": "publish",
     "queue": "notifications",
     "payload": {
       "title": "Hello",
       "body": "World"
     },
     "headers": {
       "priority": "high",
       "correlationId": "corr_456",
       "timestamp": "2026-02-18T10:30:00Z"
     }
   }"""


def test_seed_publish() -> None:
    frame = decode_json(SEED_PUBLISH)
    assert isinstance(frame, Publish)
    assert (frame.id, frame.queue) == ("msg_123", "notifications")
    assert payload(frame) == {"title": "Hello", "body": "World"}
    assert frame.headers == {
        "priority": "high",
        "correlationId": "corr_456",
        "timestamp": "2026-02-18T10:30:00Z",
    }
    assert frame.priority is Priority.HIGH


def test_seed_subscribe_and_unsubscribe() -> None:
    subscribe = '{"id": "sub_123", "type": "subscribe", "queue": "notifications"}'
    unsubscribe = '{"id": "unsub_123", "type": "unsubscribe", "queue": "notifications"}'
    assert decode_json(subscribe) == Subscribe(id="sub_123", queue="notifications")
    assert decode_json(unsubscribe) == Unsubscribe(id="unsub_123", queue="notifications")


def test_seed_ack() -> None:
    frame = decode_json('{"id": "ack_123", "type": "ack", "headers": {"messageId": "msg_123"}}')
    assert isinstance(frame, Ack)
    assert frame.id == "ack_123"
    assert frame.message_id == "msg_123"


def test_original_client_ack_form() -> None:
    frame = decode_json('{"id": "msg_123", "type": "Ack"}')
    assert isinstance(frame, Ack)
    assert frame.message_id == "msg_123"


def test_seed_create_queue() -> None:
    frame = decode_json("""
   {
     "id": "create_123",
     "type": "createQueue",
     "queue": "my-queue",
     "headers": {
       "deliveryMode": "RoundRobin",
       "maxQueueSize": "10000",
       "messageTtl": "3600000"
     }
   }""")
    assert isinstance(frame, CreateQueue)
    options = parse_queue_options(frame)
    assert options.delivery_mode is DeliveryMode.ROUND_ROBIN
    assert options.max_queue_size == 10000
    assert options.message_ttl == 3600000


def test_seed_queue_management_requests() -> None:
    assert decode_json('{"id": "delete_123", "type": "deleteQueue", "queue": "my-queue"}') == (
        DeleteQueue(id="delete_123", queue="my-queue")
    )
    assert decode_json('{"id": "info_123", "type": "queueInfo", "queue": "my-queue"}') == (
        QueueInfo(id="info_123", queue="my-queue")
    )
    assert decode_json('{"id": "list_123", "type": "listQueues"}') == ListQueues(id="list_123")


def test_seed_exchange_examples() -> None:
    connect = decode_json(
        '{"id": "conn_001", "type": "connect", "headers": {"authToken": "my-token"}}'
    )
    assert connect == Connect(id="conn_001", headers={"authToken": "my-token"})
    publish = decode_json(
        '{"id": "msg_001", "type": "publish", "queue": "notifications",'
        ' "payload": {"title": "Hello", "body": "World"}}'
    )
    assert isinstance(publish, Publish)
    assert publish.priority is Priority.NORMAL
    ack = decode_json('{"id": "ack_001", "type": "ack", "headers": {"messageId": "msg_001"}}')
    assert isinstance(ack, Ack)
    assert ack.message_id == "msg_001"


def test_spec_publish_example() -> None:
    frame = decode_json(
        '{"id": "msg_1", "type": "publish", "queue": "orders", "payload": 42,'
        ' "headers": {"priority": "high", "correlationId": "c-9",'
        ' "timestamp": "2026-02-18T10:30:00Z"}}'
    )
    assert isinstance(frame, Publish)
    assert (frame.id, frame.queue, payload(frame)) == ("msg_1", "orders", 42)


def test_seed_length_prefix_example() -> None:
    body = b'{"id":"msg_123","type":"publish","queue":"notifications","payload":"'
    body += b"x" * (90 - len(body) - 2) + b'"}'
    assert len(body) == 90
    (frame,) = FrameDecoder().feed(b"\x00\x00\x00\x5a" + body)
    assert isinstance(frame, Publish)
    assert frame.id == "msg_123"


# Server → client: built with the reply helpers, compared byte for byte


def test_connect_ack() -> None:
    request = Connect(id="conn_123", headers={"authToken": "t"})
    frame = connect_ack(request, server_version="1.0.0", connection_id="srv_456")
    assert encode_json(frame) == (
        b'{"id":"conn_123","type":"connectAck",'
        b'"headers":{"serverVersion":"1.0.0","connectionId":"srv_456"},"schemaVersion":"1.0"}'
    )


def test_pong() -> None:
    frame = pong(Ping(id="ping_123"))
    assert encode_json(frame) == b'{"id":"ping_123","type":"pong","schemaVersion":"1.0"}'
    assert encode_frame(frame) == b"\x00\x00\x00\x35" + encode_json(frame)


def test_publish_ack() -> None:
    frame = publish_ack(Publish(id="msg_1", queue="orders"))
    assert encode_json(frame) == (
        b'{"id":"msg_1","type":"publishAck","queue":"orders",'
        b'"headers":{"messageId":"msg_1","queueName":"orders"},"schemaVersion":"1.0"}'
    )


def test_publish_ack_overflow_flags() -> None:
    dropped = publish_ack(Publish(id="m", queue="q"), dropped=True)
    assert dropped.headers == {"messageId": "m", "queueName": "q", "dropped": "true"}
    redirected = publish_ack(Publish(id="m", queue="q"), dead_lettered=True)
    assert redirected.headers["deadLettered"] == "true"


def test_subscribe_ack() -> None:
    frame = subscribe_ack(Subscribe(id="sub_123", queue="notifications"))
    assert encode_json(frame) == (
        b'{"id":"sub_123","type":"subscribeAck","queue":"notifications",'
        b'"headers":{"queueName":"notifications","subscriptionId":"sub_123"},"schemaVersion":"1.0"}'
    )


def test_unsubscribe_ack() -> None:
    frame = unsubscribe_ack(Unsubscribe(id="unsub_123", queue="notifications"))
    assert encode_json(frame) == (
        b'{"id":"unsub_123","type":"unsubscribeAck","queue":"notifications",'
        b'"headers":{"queueName":"notifications"},"schemaVersion":"1.0"}'
    )


def test_deliver_passes_the_payload_through_verbatim() -> None:
    published = decode_json(
        b'{"id":"msg_123","type":"publish","queue":"notifications",'
        b'"payload":{"title": "Hello", "body": "World"},"headers":{"priority":"high"}}'
    )
    assert isinstance(published, Publish)
    frame = deliver(published.id, published.queue, published.payload, published.headers, attempt=1)
    assert encode_json(frame) == (
        b'{"id":"msg_123","type":"deliver","queue":"notifications",'
        b'"payload":{"title": "Hello", "body": "World"},'
        b'"headers":{"priority":"high","deliveryAttempts":"1"},"schemaVersion":"1.0"}'
    )


INFO = QueueInfoPayload(
    name="my-queue",
    message_count=42,
    subscriber_count=3,
    delivery_mode=DeliveryMode.ROUND_ROBIN,
    max_size=10000,
    created_at=datetime(2026, 2, 18, 10, 0, tzinfo=UTC),
    in_flight_count=2,
    message_ttl=None,
    enable_dead_letter_queue=False,
    dead_letter_queue_name="my-queue.dlq",
)
INFO_JSON = (
    b'{"name":"my-queue","messageCount":42,"subscriberCount":3,"deliveryMode":"RoundRobin",'
    b'"maxSize":10000,"createdAt":"2026-02-18T10:00:00Z","inFlightCount":2,"messageTtl":null,'
    b'"enableDeadLetterQueue":false,"deadLetterQueueName":"my-queue.dlq","maxRetryAttempts":3,'
    b'"overflowStrategy":"DropOldest"}'
)


def test_queue_info_reply() -> None:
    frame = QueueInfo(id="info_123", queue="my-queue", payload=INFO)
    assert encode_json(frame) == (
        b'{"id":"info_123","type":"queueInfo","queue":"my-queue","payload":'
        + INFO_JSON
        + b',"schemaVersion":"1.0"}'
    )


def test_seed_queue_info_reply_decodes_into_payload_struct() -> None:
    frame = decode_json(
        """{"id": "info_123", "type": "queueInfo", "queue": "my-queue",
            "payload": {"name": "my-queue", "messageCount": 42, "subscriberCount": 3,
                        "deliveryMode": "RoundRobin", "maxSize": 10000,
                        "createdAt": "2026-02-18T10:00:00Z"}}""",
        accept_server_frames=True,
    )
    assert isinstance(frame, QueueInfo)
    info = msgspec.json.decode(frame.payload, type=QueueInfoPayload)
    assert info.message_count == 42
    assert info.created_at == datetime(2026, 2, 18, 10, tzinfo=UTC)
    assert info.message_ttl is None


def test_create_queue_reply() -> None:
    frame = CreateQueue(id="create_123", queue="my-queue", payload=INFO)
    assert encode_json(frame).startswith(
        b'{"id":"create_123","type":"createQueue","queue":"my-queue","payload":{"name"'
    )


def test_delete_queue_reply() -> None:
    assert encode_json(DeleteQueue(id="delete_123", queue="my-queue")) == (
        b'{"id":"delete_123","type":"deleteQueue","queue":"my-queue","schemaVersion":"1.0"}'
    )


def test_list_queues_reply() -> None:
    frame = ListQueues(id="list_123", payload=["queue1", "queue2", "queue3"])
    assert encode_json(frame) == (
        b'{"id":"list_123","type":"listQueues","payload":["queue1","queue2","queue3"],'
        b'"schemaVersion":"1.0"}'
    )


def test_error_frame_shape() -> None:
    frame = error_frame(ErrorCode.AUTH_FAILED, "Invalid authentication token", request_id="err_123")
    assert encode_json(frame) == (
        b'{"id":"err_123","type":"error","errorCode":"AUTH_FAILED",'
        b'"errorMessage":"Invalid authentication token","schemaVersion":"1.0"}'
    )


def test_error_without_request_id_gets_a_fresh_id() -> None:
    first = error_frame(ErrorCode.CONNECTION_LIMIT, "too many connections")
    second = error_frame(ErrorCode.CONNECTION_LIMIT, "too many connections")
    assert first.id and second.id and first.id != second.id


def test_shutdown_disconnect() -> None:
    assert encode_json(shutdown_notice()) == (
        b'{"type":"disconnect","headers":{"reason":"server_shutdown"},"schemaVersion":"1.0"}'
    )


@pytest.mark.parametrize(
    "text",
    [
        '{"id": "conn_123", "type": "connectAck",'
        ' "headers": {"serverVersion": "1.0.0", "connectionId": "srv_456"}}',
        '{"id": "ping_123", "type": "pong"}',
        '{"id": "msg_123", "type": "publishAck",'
        ' "headers": {"messageId": "msg_123", "queueName": "notifications"}}',
        '{"id": "sub_123", "type": "subscribeAck",'
        ' "headers": {"queueName": "notifications", "subscriptionId": "sub_123"}}',
        '{"id": "unsub_123", "type": "unsubscribeAck", "headers": {"queueName": "notifications"}}',
        '{"id": "msg_123", "type": "deliver", "queue": "notifications",'
        ' "payload": {"title": "Hello", "body": "World"},'
        ' "headers": {"priority": "high", "deliveryAttempts": "1"}}',
        '{"id": "err_123", "type": "error", "errorCode": "AUTH_FAILED",'
        ' "errorMessage": "Invalid authentication token"}',
        '{"type": "disconnect", "headers": {"reason": "server_shutdown"}}',
        '{"id": "list_123", "type": "listQueues", "payload": ["queue1", "queue2", "queue3"]}',
    ],
)
def test_seed_server_frames_decode_on_the_client_side(text: str) -> None:
    frame = decode_json(text, accept_server_frames=True)
    assert frame.TYPE in SERVER_ONLY_TYPES | {CommandType.DISCONNECT, CommandType.LIST_QUEUES}
    assert decode_json(encode_json(frame), accept_server_frames=True) == frame
