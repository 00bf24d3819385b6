"""zbus 5.x vocabulary: commands, admin sub-commands, header names, MQ modes, reason phrases.

Everything here is a name or number fixed by the protocol (zbus.md §§1, 3, 4, 7, 11); the
codec and the broker share these instead of spelling string literals.
"""

from __future__ import annotations

import http
from enum import IntFlag, StrEnum

BROKER_PORT = 15555
TRACKER_PORT = 16666
TRACKER_HA_PORT = 16667

MAX_HEAD_BYTES = 64 * 1024
"""Default limit on the header block, start line and blank line included (§1)."""
MAX_BODY_BYTES = 16 * 1024 * 1024
"""Default limit on the body (§1); configurable."""


class Command(StrEnum):
    """Values of the ``cmd`` header (§4, §11.4)."""

    PRODUCE = "produce"
    CONSUME = "consume"
    REQUEST = "request"
    HEARTBEAT = "heartbeat"
    ADMIN = "admin"
    TRACK_REPORT = "track_report"
    TRACK_SUB = "track_sub"
    TRACK_PUB = "track_pub"


BROKER_COMMANDS = frozenset(
    {Command.PRODUCE, Command.CONSUME, Command.REQUEST, Command.HEARTBEAT, Command.ADMIN}
)
TRACKER_COMMANDS = frozenset({Command.TRACK_REPORT, Command.TRACK_SUB, Command.HEARTBEAT})
"""Commands the track server accepts; it sends ``track_pub`` itself (§11.4)."""


class SubCommand(StrEnum):
    """Values of ``sub_cmd`` (alias ``method``) on ``cmd: admin`` (§11.2, §11.4 seed-000 form)."""

    INDEX = "index"
    JQUERY = "jquery"
    DATA = "data"
    CREATE_MQ = "create_mq"
    TRACK_REPORT = "track_report"
    TRACK_SUB = "track_sub"


class Header:
    """Canonical header names, as the broker writes them (§3, §5, §13.1); plain strings."""

    CMD = "cmd"
    MQ = "mq"
    MQ_REPLY = "mq_reply"
    MSGID = "msgid"
    MSGID_RAW = "msgid_raw"
    SUB_CMD = "sub_cmd"
    REPLY_CODE = "reply_code"
    TOKEN = "token"
    TOPIC = "topic"
    ACK = "ack"
    WINDOW = "window"
    BROKER = "broker"
    REMOTE_ADDR = "remote-addr"
    CONTENT_LENGTH = "content-length"
    CONTENT_TYPE = "content-type"
    CONTENT_ENCODING = "content-encoding"
    ENCODING = "encoding"
    BODY = "body"
    REDELIVERED = "redelivered"


class MqMode(IntFlag):
    """The ``mqMode`` bit set (§7). Mode 0 is a plain queue."""

    MQ = 1
    PUBSUB = 2
    TEMP = 4


REPLY_QUEUE_MODE = MqMode.MQ | MqMode.TEMP
"""Mode of the reply queues that ``request`` creates (§7, §10)."""

REASONS: dict[int, str] = {
    200: "OK",
    400: "Bad Request",
    403: "Forbidden",
    404: "Not Found",
    500: "Internal Server Error",
}
"""The reason phrases the broker writes (§1)."""


def reason_phrase(status: int) -> str:
    """The reason phrase for ``status``: the §1 table first, then the standard HTTP phrase.

    Statuses outside the table only appear when a worker's ``reply_code`` (or its own
    response status) is relayed to a requester (§9.1, §10).
    """
    if status in REASONS:
        return REASONS[status]
    try:
        return http.HTTPStatus(status).phrase
    except ValueError:
        return "Unknown Status"
