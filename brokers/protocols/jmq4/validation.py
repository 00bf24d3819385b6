"""Per-entry validation the broker applies after a frame decoded cleanly (spec §8.5).

Each function returns ``None`` when the value is acceptable, otherwise the §7 code to report
(always :attr:`Code.CN_PARAM_ERROR`): in the topic entry's ``code`` where the response has
one, or as a BooleanAck status otherwise.
"""

from __future__ import annotations

import re

from brokers.protocols.jmq4.batch import decode_batch
from brokers.protocols.jmq4.codes import Code
from brokers.protocols.jmq4.errors import DecodeError
from brokers.protocols.jmq4.message import (
    SYS_BATCH,
    SYS_COMPRESSED,
    SYS_RESERVED_MASK,
    BrokerMessage,
)

MAX_BODY_SIZE = 3 * 1024 * 1024
MAX_BUSINESS_ID_LENGTH = 100
MAX_NAME_LENGTH = 255
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")


def validate_name(name: str) -> Code | None:
    """Topic and app names: 1–255 characters, no control characters."""
    if not 1 <= len(name) <= MAX_NAME_LENGTH or _CONTROL.search(name):
        return Code.CN_PARAM_ERROR
    return None


def missing_topic_code(name: str) -> Code:
    """The code of a topic the catalog does not hold: 189 (no such topic), or 6 for a name
    no topic can have (§8.5)."""
    return validate_name(name) or Code.FW_TOPIC_NOT_EXIST


def validate_batch(body: bytes, flag: int) -> Code | None:
    """An uncompressed batch body must split exactly into ``flag`` (at least one) items."""
    if flag < 1:
        return Code.CN_PARAM_ERROR
    try:
        items = decode_batch(body)
    except DecodeError:
        return Code.CN_PARAM_ERROR
    return None if len(items) == flag else Code.CN_PARAM_ERROR


def validate_message(message: BrokerMessage) -> Code | None:
    """Check a produced message: declared size, reserved sysCode bits, limits and batch body.

    A batch must hold at least one item. A compressed batch body cannot be split (the broker
    never decompresses), so only its ``flag`` is checked.
    """
    if message.size != message.encoded_size:
        return Code.CN_PARAM_ERROR
    if message.sys_code & SYS_RESERVED_MASK:
        return Code.CN_PARAM_ERROR
    if len(message.body) > MAX_BODY_SIZE or len(message.business_id) > MAX_BUSINESS_ID_LENGTH:
        return Code.CN_PARAM_ERROR
    if message.sys_code & SYS_BATCH:
        if message.sys_code & SYS_COMPRESSED:
            return None if message.flag > 0 else Code.CN_PARAM_ERROR
        return validate_batch(message.body, message.flag)
    return None
