"""Building produced messages (compression, batches) and reading fetched ones (spec §3)."""

from __future__ import annotations

import time
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from brokers.protocols.jmq4 import (
    SYS_BATCH,
    SYS_COMPRESSED,
    BatchItem,
    BrokerMessage,
    CompressionType,
    SysCode,
    decode_attributes,
    decode_batch,
    encode_attributes,
    encode_batch,
)

COMPRESS_THRESHOLD = 100
"""Bodies over this many bytes are zlib-compressed when compression is on (as in Java)."""


@dataclass(frozen=True, slots=True)
class OutgoingMessage:
    """A message to produce."""

    body: bytes
    business_id: str = ""
    attributes: Mapping[str, str] = field(default_factory=dict)
    priority: int = 0


def _sys_code(*, compressed: bool, ordered: bool, batch: bool) -> int:
    return SysCode(
        compressed=compressed,
        ordered=ordered,
        compression=CompressionType.ZLIB if compressed else CompressionType.NONE,
        batch=batch,
    ).encode()


def _maybe_compress(body: bytes, compress: bool) -> tuple[bytes, bool]:
    if compress and len(body) > COMPRESS_THRESHOLD:
        return zlib.compress(body), True
    return body, False


def build_message(
    msg: OutgoingMessage,
    *,
    app: str,
    partition: int = -1,
    compress: bool = True,
    ordered: bool = False,
) -> BrokerMessage:
    """One BrokerMessage; the body is zlib-compressed (sysCode bits 0 and 4–6) when large."""
    body, compressed = _maybe_compress(msg.body, compress)
    return BrokerMessage(
        partition=partition,
        sys_code=_sys_code(compressed=compressed, ordered=ordered, batch=False),
        priority=msg.priority,
        send_time=time.time_ns() // 1_000_000,
        body_crc=zlib.crc32(body),
        body=body,
        business_id=msg.business_id,
        attributes=encode_attributes(dict(msg.attributes)),
        app=app,
    )


def build_batch(
    messages: Sequence[OutgoingMessage],
    *,
    app: str,
    partition: int = -1,
    compress: bool = True,
) -> BrokerMessage:
    """One batch message (sysCode bit 12, flag = item count) carrying ``messages``."""
    body = encode_batch(
        [
            BatchItem(
                priority=m.priority,
                body=m.body,
                business_id=m.business_id,
                attributes=encode_attributes(dict(m.attributes)),
            )
            for m in messages
        ]
    )
    body, compressed = _maybe_compress(body, compress)
    return BrokerMessage(
        partition=partition,
        sys_code=_sys_code(compressed=compressed, ordered=False, batch=True),
        send_time=time.time_ns() // 1_000_000,
        body_crc=zlib.crc32(body),
        flag=len(messages),
        body=body,
        app=app,
    )


@dataclass(frozen=True, slots=True)
class ReceivedMessage:
    """A consumed message (a batch is expanded: item *i* has ``index + i``)."""

    topic: str
    partition: int
    index: int
    body: bytes
    business_id: str = ""
    attributes: dict[str, str] = field(default_factory=dict)
    priority: int = 0
    app: str = ""
    send_time: int = 0
    batch_index: int = 0


def _decompress(message: BrokerMessage) -> bytes:
    if not message.sys_code & SYS_COMPRESSED:
        return message.body
    compression = message.flags.compression
    if compression in (CompressionType.ZLIB, CompressionType.ZIP):
        return zlib.decompress(message.body)
    raise ValueError(f"unsupported compression {compression}")


def expand(topic: str, message: BrokerMessage) -> list[ReceivedMessage]:
    """The messages a fetched BrokerMessage carries, decompressed."""
    body = _decompress(message)
    if not message.sys_code & SYS_BATCH:
        return [
            ReceivedMessage(
                topic=topic,
                partition=message.partition,
                index=message.index,
                body=body,
                business_id=message.business_id,
                attributes=message.attribute_map(),
                priority=message.priority,
                app=message.app,
                send_time=message.send_time,
            )
        ]
    return [
        ReceivedMessage(
            topic=topic,
            partition=message.partition,
            index=message.index + i,
            body=item.body,
            business_id=item.business_id,
            attributes=decode_attributes(item.attributes),
            priority=item.priority,
            app=message.app,
            send_time=message.send_time,
            batch_index=i,
        )
        for i, item in enumerate(decode_batch(body))
    ]
