"""How stored messages look to HTTP-MQ clients: ids, text bodies, properties, send results.

A msgList entry carries the record's properties map as ``properties`` (an addition to
http-mq.md's fields, present only when the message has any): the producer's headers
whatever protocol it used."""

from __future__ import annotations

import base64
import functools
import zlib
from typing import Any

from brokers.engine import DELAY_ID, Delivery, TopicInfo, message_view, one_by_one

HTTPMQ_EXTENSION = b"hm1\0"
"""The record extension of messages produced over HTTP-MQ, so the message browser can say
which protocol produced a message (zbus marks its records the same way, with ``zb1\0``
and its headers). Consumers of every protocol ignore it."""


@functools.lru_cache(maxsize=4096)
def _topic_checksum(topic: str) -> str:
    return f"{zlib.crc32(topic.encode()) & 0xFFFFFFFF:08x}"


DELAYED = 0xFFFFFFFF
"""The partition field of a delayed or timer message's id (:func:`delayed_message_id`)."""


def message_id(topic: str, partition: int, index: int) -> str:
    """32 hex digits naming a stored message: topic checksum, partition, index."""
    return f"{_topic_checksum(topic)}{partition:08x}{index:016x}"


def delayed_message_id(topic: str, delay_id: int) -> str:
    """The id of a delayed or timer message, given when it is produced (before it has a
    position) and kept once it is delivered: topic checksum, ``ffffffff``, delay id."""
    return message_id(topic, DELAYED, delay_id)


def parse_message_id(topic: str, value: str) -> tuple[int, int]:
    """(partition, index) of a :func:`message_id` of ``topic`` — (:data:`DELAYED`, delay
    id) for a :func:`delayed_message_id`; ValueError otherwise."""
    if len(value) != 32:
        raise ValueError("a message id has 32 hex digits")
    try:
        crc, partition, index = int(value[:8], 16), int(value[8:16], 16), int(value[16:], 16)
    except ValueError:
        raise ValueError("a message id has 32 hex digits") from None
    if crc != zlib.crc32(topic.encode()) & 0xFFFFFFFF:
        raise ValueError(f"message id {value} is not of topic {topic}")
    return partition, index


def offset_message_id(partition: int, index: int, store_ms: int) -> str:
    """32 hex digits encoding the stored position and its store time."""
    return f"{partition:08x}{index:016x}{store_ms & 0xFFFFFFFF:08x}"


def broker_name(topic: TopicInfo, partition: int) -> str:
    """The queue's broker name: its partition group's leader."""
    leader = topic.leader_of(partition)
    return f"broker-{leader}" if leader is not None else "broker-unknown"


def text_entry(body: bytes, entry: dict[str, Any]) -> dict[str, Any]:
    """Add ``message`` as UTF-8 text, or base64 with ``encoding`` when it is not UTF-8."""
    try:
        entry["message"] = body.decode("utf-8")
    except UnicodeDecodeError:
        entry["message"] = base64.b64encode(body).decode("ascii")
        entry["encoding"] = "base64"
    return entry


def _delay_id(value: str | None) -> int | None:
    """The delay id a released message carries, or None (absent, or not one the engine
    wrote: a JMQ4 client can name an attribute anything)."""
    if value is None or not (value.isascii() and value.isdigit()) or len(value) > 19:
        return None
    return int(value)


def deliveries_to_list(topic: str, deliveries: tuple[Delivery, ...]) -> list[dict[str, Any]]:
    """One msgList entry per message: the engine splits batch records into their items
    and inflates compressed bodies (:func:`brokers.engine.one_by_one`). A message that
    was held (delayed or timer) keeps the ``msgId`` its producer was given."""
    out: list[dict[str, Any]] = []
    checksum = _topic_checksum(topic)
    for delivery in one_by_one(deliveries):
        store_ms, body, _, attributes = message_view(delivery.record)
        entry: dict[str, Any] = {
            "messageId": f"{checksum}{delivery.partition:08x}{delivery.index:016x}",
            "timestamp": store_ms,
        }
        if attributes:  # every protocol's metadata: zbus and VibeMQ headers too
            entry["properties"] = attributes
            if (held := _delay_id(attributes.get(DELAY_ID))) is not None:
                entry["messageId"] = delayed_message_id(topic, held)
        try:
            entry["message"] = body.decode("utf-8")
        except UnicodeDecodeError:
            text_entry(body, entry)
        out.append(entry)
    return out
