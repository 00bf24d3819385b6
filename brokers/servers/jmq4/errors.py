"""Errors a handler raises to answer with a BooleanAck, and the engine-error → code mapping."""

from __future__ import annotations

import brokers.engine as errors
from brokers.engine import EngineError
from brokers.protocols.jmq4 import Code

ENGINE_CODES: dict[type[EngineError], int] = {
    errors.EngineError: Code.CN_UNKNOWN_ERROR,
    errors.StoreUnavailable: Code.CN_SERVICE_NOT_AVAILABLE,
    errors.TopicNotFound: Code.FW_TOPIC_NOT_EXIST,
    errors.PartitionNotFound: Code.CN_PARAM_ERROR,
    errors.AccessDenied: Code.CN_NO_PERMISSION,
    errors.ProducerNotFound: Code.FW_PUT_MESSAGE_TOPIC_NOT_WRITE,
    errors.ConsumerNotFound: Code.FW_GET_MESSAGE_TOPIC_NOT_READ,
    errors.ClientNotAllowed: Code.FW_PUT_MESSAGE_APP_CLIENT_IP_NOT_WRITE,
    errors.ConsumerClientNotAllowed: Code.FW_GET_MESSAGE_APP_CLIENT_IP_NOT_READ,
    errors.RateLimited: Code.CT_LIMIT_REQUEST,
    errors.InvalidMessage: Code.CN_PARAM_ERROR,
    errors.MessageTooLarge: Code.CN_PARAM_ERROR,
    errors.NoWritablePartition: Code.FW_TOPIC_NO_PARTITIONGROUP,
    errors.BrokerNotWritable: Code.FW_BROKER_NOT_WRITABLE,
    errors.IndexOutOfRange: Code.FW_FETCH_MESSAGE_INDEX_OUT_OF_RANGE,
    errors.AckRejected: Code.FW_CONSUMER_ACK_FAIL,
    errors.ConsumerPaused: Code.FW_FETCH_TOPIC_MESSAGE_PAUSED,
    errors.ClientIdRequired: Code.CN_PARAM_ERROR,
    errors.ClientIdNotAllowed: Code.CN_PARAM_ERROR,
    errors.TransactionNotFound: Code.CN_TRANSACTION_NOT_EXISTS,
    errors.TransactionLimit: Code.FW_TRANSACTION_LIMIT,
    errors.QueueFull: Code.FW_PUT_MESSAGE_ERROR,
    errors.WriteTimeout: Code.SE_WRITE_TIMEOUT,
}
"""The §7 code of each engine error (a subclass not listed answers its base's code)."""

_CODES = frozenset(int(c) for c in Code)


class Reject(Exception):
    """Answer the request with a BooleanAck carrying ``code`` (a §7 code ≤ 255)."""

    def __init__(self, code: int, text: str = "") -> None:
        super().__init__(text or f"code {code}")
        self.code = code if code in _CODES and code <= 255 else Code.CN_UNKNOWN_ERROR
        self.text = text


def wire_code(code: int) -> int:
    """``code`` if it is a §7 code, otherwise 4 (unknown error): nothing else goes out."""
    return code if code in _CODES else Code.CN_UNKNOWN_ERROR


def engine_code(exc: EngineError) -> int:
    """The §7 code of an engine error: its class's, or its nearest base's."""
    for cls in type(exc).__mro__:
        if cls in ENGINE_CODES:
            return wire_code(ENGINE_CODES[cls])
    return Code.CN_UNKNOWN_ERROR
