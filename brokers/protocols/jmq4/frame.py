"""Frames: the payload registry, frame encoding and the response-building helpers (§2.2).

A :class:`Frame` pairs a :class:`Header` with a typed payload. :func:`encode_frame` computes
the length prefix. :func:`response_frame` builds a typed response that echoes the request
header; :func:`boolean_ack` builds the fresh-header BooleanAck used for acks and rejections.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass

from brokers.protocols.jmq4 import cluster, connection, consume, produce, transaction
from brokers.protocols.jmq4.codes import Code, CommandType, response_type
from brokers.protocols.jmq4.errors import EncodeError
from brokers.protocols.jmq4.header import CURRENT_VERSION, Direction, Header, QosLevel
from brokers.protocols.jmq4.payload import Payload
from brokers.protocols.jmq4.primitives import BYTES4_MAX, S2_MAX, Writer

_PAYLOAD_CLASSES: tuple[type[Payload], ...] = (
    connection.AddConnectionRequest,
    connection.AddConnectionResponse,
    connection.RemoveConnectionRequest,
    connection.HeartbeatRequest,
    connection.FetchHealthRequest,
    connection.FetchHealthResponse,
    connection.BooleanAck,
    consume.AddConsumerRequest,
    consume.AddConsumerResponse,
    consume.RemoveConsumerRequest,
    produce.AddProducerRequest,
    produce.AddProducerResponse,
    produce.RemoveProducerRequest,
    cluster.FetchClusterRequest,
    cluster.FetchClusterResponse,
    cluster.FindCoordinatorRequest,
    cluster.FindCoordinatorResponse,
    cluster.FetchAssignedPartitionRequest,
    cluster.FetchAssignedPartitionResponse,
    consume.FetchTopicMessageRequest,
    consume.FetchTopicMessageResponse,
    consume.FetchPartitionMessageRequest,
    consume.FetchPartitionMessageResponse,
    consume.CommitAckRequest,
    consume.CommitAckResponse,
    consume.CommitAckIndexRequest,
    consume.CommitAckIndexResponse,
    consume.FetchIndexRequest,
    consume.FetchIndexResponse,
    produce.ProduceMessageRequest,
    produce.ProduceMessageResponse,
    transaction.PrepareRequest,
    transaction.PrepareResponse,
    transaction.CommitRequest,
    transaction.CommitResponse,
    transaction.RollbackRequest,
    transaction.RollbackResponse,
    transaction.FetchProduceFeedbackRequest,
    transaction.FetchProduceFeedbackResponse,
)

_COMMAND_TYPES = {member.value: member for member in CommandType}

REQUEST_PAYLOADS: Mapping[int, type[Payload]] = {
    cls.TYPE: cls for cls in _PAYLOAD_CLASSES if cls.TYPE.is_request
}
"""Request type → payload class. Types absent here (34, 100–103, …) are unknown commands."""

RESPONSE_PAYLOADS: Mapping[int, type[Payload]] = {
    cls.TYPE: cls for cls in _PAYLOAD_CLASSES if not cls.TYPE.is_request
}
"""Response type → payload class, including BOOLEAN_ACK."""


def payload_class(type_: int, direction: Direction) -> type[Payload] | None:
    """The payload class for a header type and direction, or ``None`` if unknown."""
    table = RESPONSE_PAYLOADS if direction == Direction.RESPONSE else REQUEST_PAYLOADS
    return table.get(type_)


@dataclass(frozen=True, slots=True)
class Frame:
    """A complete decoded (or to-be-encoded) frame."""

    header: Header
    payload: Payload

    def encode(self) -> bytes:
        """Encode the frame, computing the length prefix."""
        return encode_frame(self.header, self.payload)


def encode_frame(header: Header, payload: Payload) -> bytes:
    """Encode ``header`` + ``payload``; the payload layout follows ``header.version``."""
    expected = payload_class(header.type, header.direction)
    if expected is None or not isinstance(payload, expected):
        raise EncodeError(
            f"{type(payload).__name__} does not match header type {header.type!r} "
            f"(direction {int(header.direction)})"
        )
    w = Writer()
    w.write_int(0)
    header.write(w)
    payload.write(w, header.version)
    data = w.getvalue()
    if len(data) > BYTES4_MAX:
        raise EncodeError(f"frame of {len(data)} bytes is too large")
    return len(data).to_bytes(4, "big") + data[4:]


def response_header(request: Header) -> Header:
    """The header of a typed response: the request's with direction 1 and the response type.

    Version, requestId, QoS and sendTime are echoed; status is 0 and error empty.
    """
    request_type = _COMMAND_TYPES.get(request.type)
    if request.is_response or request_type is None or not request_type.is_request:
        raise EncodeError(f"header type {request.type!r} is not a known request")
    resp_type = response_type(request_type)
    if resp_type is CommandType.BOOLEAN_ACK:
        raise EncodeError(f"{request_type.name} is answered with a BooleanAck")
    return Header(
        version=request.version,
        direction=Direction.RESPONSE,
        qos=request.qos,
        request_id=request.request_id,
        type=resp_type,
        send_time=request.send_time,
    )


def response_frame(request: Header, payload: Payload) -> Frame:
    """A typed response frame answering ``request``."""
    header = response_header(request)
    if header.type != payload.TYPE:
        raise EncodeError(f"{type(payload).__name__} does not answer {request.type!r}")
    return Frame(header, payload)


def _truncate_utf8(text: str, limit: int) -> str:
    return text.encode("utf-8", "replace")[:limit].decode("utf-8", "ignore")


def boolean_ack(
    request: Header, status: int = Code.SUCCESS, error: str = "", *, send_time: int | None = None
) -> Frame:
    """A BooleanAck answering ``request``: fresh header, version 4, QoS RECEIVE, request's id.

    ``send_time`` defaults to the current time in ms; ``error`` is cut to fit an S2.
    """
    header = Header(
        version=CURRENT_VERSION,
        direction=Direction.RESPONSE,
        qos=QosLevel.RECEIVE,
        request_id=request.request_id,
        type=CommandType.BOOLEAN_ACK,
        send_time=time.time_ns() // 1_000_000 if send_time is None else send_time,
        status=status,
        error=_truncate_utf8(error, S2_MAX),
    )
    return Frame(header, connection.BooleanAck())
