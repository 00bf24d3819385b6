"""Deliveries one message each, for consumers that are not JMQ4.

A JMQ4 producer may store a *batch* record (n items taking n consecutive indexes) and a
compressed body; JMQ4 consumers get those records as stored. Every other consumer (zbus,
VibeMQ, HTTP-MQ) gets messages: :func:`one_by_one` turns each batch into one delivery per
item — its own index, body, businessId and attributes — and inflates compressed bodies,
so the rule lives here once instead of in each front-end. An item delivery is settled by
its own index, like any other message.

A record that cannot be opened (a compression type nobody implements, a corrupt batch
body) is handed on as stored: the consumer gets the bytes the producer sent rather than
nothing, and the group does not stall on it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence

from brokers.engine.errors import InvalidMessage
from brokers.engine.model import Delivery
from brokers.engine.record import (
    MAX_INFLATED,
    SYS_BATCH,
    SYS_COMPRESSED,
    SYS_SHORT_ADDRESS,
    Message,
    RecordEncoder,
    StoredMessage,
    decode_record,
    inflate_body,
    with_position,
)

log = logging.getLogger("mqcloud.engine")

_COMPRESSION_BITS = SYS_COMPRESSED | 0x0070  # the flag and the compression type (bits 4-6)
_NEEDS_OPENING = SYS_BATCH | SYS_COMPRESSED


def needs_opening(record: bytes) -> bool:
    """True when ``record`` is a batch or has a compressed body (sysCode bits 12 and 0:
    the big-endian SHORT at byte 20, read a byte at a time — this runs per delivery)."""
    return bool(record[20] & (_NEEDS_OPENING >> 8) or record[21] & (_NEEDS_OPENING & 0xFF))


def one_by_one(
    deliveries: Iterable[Delivery], runs: Sequence[tuple[int, int]] | None = None
) -> list[Delivery]:
    """``deliveries`` as one message each: batches split into their items (only items
    inside ``runs``, the ``[start, end)`` index runs handed out, when given), compressed
    bodies inflated. Plain records pass through untouched (no decoding)."""
    out: list[Delivery] = []
    for d in deliveries:
        if not needs_opening(d.record):
            out.append(d)
            continue
        try:
            out.extend(_opened(d, runs))
        except InvalidMessage as exc:
            log.warning(
                "record %s/%s cannot be opened (%s): delivered as stored", d.partition, d.index, exc
            )
            out.append(d)
    return out


def is_batch(record: bytes) -> bool:
    """True when ``record`` is a JMQ4 batch (sysCode bit 12, read as :func:`needs_opening`)."""
    return bool(record[20] & (SYS_BATCH >> 8))


def split_batches(
    entries: Sequence[tuple[int, int, int, bytes]],
    runs: Sequence[tuple[int, int]] | None = None,
) -> list[tuple[int, int, int, bytes]]:
    """``(partition, index, count, record)`` entries with every batch record split into
    its items, one entry each at its own index (a compressed batch body inflated; the
    items' own bodies as stored): what a retry store or a dead-letter queue keeps, so that
    each item is retried, settled, dead-lettered and resent on its own. Given ``runs``
    (``[start, end)`` index runs), only the items inside them are kept: a consumer that
    failed one item of a batch gets that item back, not the ones it acked. A batch that
    cannot be opened stays whole."""
    out: list[tuple[int, int, int, bytes]] = []
    for partition, index, count, record in entries:
        if not is_batch(record):
            out.append((partition, index, count, record))
            continue
        try:
            items = _opened(Delivery(partition, index, count, record), runs)
        except InvalidMessage as exc:
            log.warning("batch %s/%s cannot be opened (%s): kept whole", partition, index, exc)
            out.append((partition, index, count, record))
            continue
        out.extend((partition, d.index, 1, d.record) for d in items)
    return out


def _inside(index: int, runs: Sequence[tuple[int, int]] | None) -> bool:
    return runs is None or any(a <= index < b for a, b in runs)


def _opened(d: Delivery, runs: Sequence[tuple[int, int]] | None) -> list[Delivery]:
    stored = decode_record(d.record)
    items = stored.items()  # inflates a compressed batch body
    if not stored.is_batch:
        body = inflate_body(stored.body, stored.sys_code)
        record = _record(
            stored,
            body,
            stored.business_id,
            stored.attributes,
            stored.priority,
            stored.flag,
            d.index,
        )
        return [_with(d, d.index, record)]
    out = []
    for k, item in enumerate(items):
        # a retry delivery (origin set) keeps its retry id: its items share it
        index = d.index if d.origin is not None else d.index + k
        if d.origin is None and not _inside(index, runs):
            continue
        record = _record(
            stored, item.body, item.business_id, item.attributes, item.priority, item.flag, index
        )
        out.append(_with(d, index, record))
    return out


def _with(d: Delivery, index: int, record: bytes) -> Delivery:
    return Delivery(
        d.partition,
        index,
        1,
        record,
        origin=d.origin,
        attempts=d.attempts,
        redelivered=d.redelivered,
    )


def _record(
    stored: StoredMessage,
    body: bytes,
    business_id: str,
    attributes: dict[str, str],
    priority: int,
    flag: int,
    index: int,
) -> bytes:
    """A plain record of one message, carrying the stored record's app, client address,
    send and store times and extension."""
    sys_code = stored.sys_code & ~(SYS_BATCH | _COMPRESSION_BITS | SYS_SHORT_ADDRESS)
    encoder = RecordEncoder(
        app=stored.app,
        partition=stored.partition,
        now_ms=stored.store_time_ms,
        client_address=stored.client_address or None,
        max_body=MAX_INFLATED,
    )
    record, _ = encoder.encode(
        Message(
            body=body,
            business_id=business_id,
            attributes=attributes,
            priority=priority,
            flag=flag,
            send_time_ms=stored.send_time_ms,
            sys_code=sys_code,
            extension=stored.extension,
        )
    )
    return with_position(record, stored.partition, index)
