"""Batch message bodies (spec §3.4): a plain concatenation of items, no count or total.

Each item is ``itemSize INT (including itself), priority BYTE, flag SHORT, body BYTES4,
businessId S1, attributes S2``. Decoding is strict: every ``itemSize`` must match its item's
content and the items must cover the body exactly.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from brokers.protocols.jmq4.errors import DecodeError
from brokers.protocols.jmq4.primitives import Reader, Writer


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchItem:
    """One message inside a batch body; ``attributes`` is raw Properties text."""

    priority: int = 0
    flag: int = 0
    body: bytes = b""
    business_id: str = ""
    attributes: str = ""


def encode_batch(items: Sequence[BatchItem]) -> bytes:
    """Serialize items into a batch body."""
    out = bytearray()
    for item in items:
        w = Writer()
        w.write_int(0)
        w.write_byte(item.priority)
        w.write_short(item.flag)
        w.write_bytes4(item.body)
        w.write_s1(item.business_id)
        w.write_s2(item.attributes)
        data = w.getvalue()
        out += len(data).to_bytes(4, "big")
        out += data[4:]
    return bytes(out)


def decode_batch(body: bytes) -> tuple[BatchItem, ...]:
    """Parse a (decompressed) batch body; raises :class:`DecodeError` if it does not add up."""
    r = Reader(bytes(body))
    items: list[BatchItem] = []
    while r.remaining:
        start = r.position
        size = r.read_int()
        item = BatchItem(
            priority=r.read_byte(),
            flag=r.read_short(),
            body=r.read_bytes4(),
            business_id=r.read_s1(),
            attributes=r.read_s2(),
        )
        if r.position - start != size:
            raise DecodeError(
                f"batch item {len(items)} declares {size} bytes but has {r.position - start}"
            )
        items.append(item)
    return tuple(items)
