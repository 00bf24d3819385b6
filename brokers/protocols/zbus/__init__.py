"""Sans-IO codec for the zbus 5.x protocol (HTTP-shaped messages on a long-lived connection).

A server feeds received bytes to a :class:`Decoder`, routes the :class:`Message` objects it
returns by their headers, and writes what :func:`encode_message` makes of the replies and
deliveries built with :mod:`~brokers.protocols.zbus.replies`. See ``zbus.md`` for the protocol.
"""

from brokers.protocols.zbus.admin import CreateMq, is_valid_mq_name, parse_create_mq
from brokers.protocols.zbus.aliases import AliasFamily
from brokers.protocols.zbus.constants import (
    BROKER_COMMANDS,
    MAX_BODY_BYTES,
    MAX_HEAD_BYTES,
    REASONS,
    REPLY_QUEUE_MODE,
    TRACKER_COMMANDS,
    Command,
    Header,
    MqMode,
    SubCommand,
    reason_phrase,
)
from brokers.protocols.zbus.decoder import Decoder
from brokers.protocols.zbus.encoder import (
    ALIASED,
    SET_BY_DELIVERY,
    alias_lines,
    encode_delivery,
    encode_delivery_blocks,
    encode_message,
    encode_reply,
    header_line,
    writable_header,
)
from brokers.protocols.zbus.errors import (
    BadContentLength,
    BodyTooLarge,
    CreateMqError,
    DecoderClosedError,
    EncodeError,
    HeadTooLarge,
    MalformedHeader,
    MalformedStartLine,
    TruncatedMessage,
    ZbusDecodeError,
    ZbusError,
)
from brokers.protocols.zbus.message import (
    Message,
    RequestLine,
    StatusLine,
    parse_status,
    topic_matches,
)
from brokers.protocols.zbus.replies import make_delivery, make_reply, make_request

__all__ = [
    "ALIASED",
    "BROKER_COMMANDS",
    "MAX_BODY_BYTES",
    "MAX_HEAD_BYTES",
    "REASONS",
    "REPLY_QUEUE_MODE",
    "SET_BY_DELIVERY",
    "TRACKER_COMMANDS",
    "AliasFamily",
    "BadContentLength",
    "BodyTooLarge",
    "Command",
    "CreateMq",
    "CreateMqError",
    "Decoder",
    "DecoderClosedError",
    "EncodeError",
    "HeadTooLarge",
    "Header",
    "MalformedHeader",
    "MalformedStartLine",
    "Message",
    "MqMode",
    "RequestLine",
    "StatusLine",
    "SubCommand",
    "TruncatedMessage",
    "ZbusDecodeError",
    "ZbusError",
    "alias_lines",
    "encode_delivery",
    "encode_delivery_blocks",
    "encode_message",
    "encode_reply",
    "header_line",
    "is_valid_mq_name",
    "make_delivery",
    "make_reply",
    "make_request",
    "parse_create_mq",
    "parse_status",
    "reason_phrase",
    "topic_matches",
    "writable_header",
]
