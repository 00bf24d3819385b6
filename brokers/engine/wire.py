"""JMQ4 wire records of one append as ONE contiguous blob: checked in one walk, stamped in one copy.

A JMQ4 producer sends its messages back to back in the stored record layout (see
:mod:`brokers.engine.record`). :func:`stamp_wire` walks such a blob (a :class:`WireBlob`)
once, applying every rule of :func:`~brokers.engine.record.check_record` to each record
while it writes partition, index, storeTime and clientIp (+ sysCode bit 7) into one copy of
the blob, which is what the APPEND script stores. :func:`check_wire` is the same walk
without the stamp, for callers that check before they know where the records go; it returns
:class:`WireRecords`, which :meth:`WireRecords.stamp` stamps later. No per-record bytes
object is built on the way.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import NamedTuple

from brokers.engine.errors import InvalidMessage, MessageTooLarge
from brokers.engine.record import (
    INT32_MAX,
    INT32_MIN,
    MAGIC,
    MAX_BUSINESS_ID,
    STORE_TERM,
    SYS_BATCH,
    SYS_COMPRESSED,
    SYS_SHORT_ADDRESS,
    check_properties,
    encode_client_ip,
    joined_properties,
)

# size, partition, index, term, magic, sysCode, priority, clientIp, sendTime, storeTime,
# bodyCRC, flag and body length: the 65 bytes before the body.
_HEAD = struct.Struct(">ihqihhb16sqiqhi")
_HEAD_SIZE = _HEAD.size
_STAMP = struct.Struct(">hqihhb16sqi")  # partition … storeTime, written at offset 4
_I16, _I32 = struct.Struct(">h"), struct.Struct(">i")
_Head = tuple[int, int, int, int, int, int, int, bytes, int, int, int, int, int]


class WireBlob(NamedTuple):
    """``count`` JMQ4 records back to back in ``blob``, as received: the append that stores
    them checks them (:func:`stamp_wire`)."""

    blob: bytes
    count: int


def _address_stamp(client_address: str | None) -> tuple[int, int, bytes]:
    """(sysCode mask, sysCode bits to add, clientIp) for records from ``client_address``;
    None keeps both as sent."""
    if client_address is None:
        return 0xFFFF, 0, b""
    ip, short = encode_client_ip(client_address)
    return (0xFFFF, SYS_SHORT_ADDRESS, ip) if short else (~SYS_SHORT_ADDRESS, 0, ip)


def _store_delta(now_ms: int, send: int) -> int:
    """storeTime: ``now_ms`` - sendTime, clamped to an INT."""
    delta = now_ms - send
    if not INT32_MIN <= delta <= INT32_MAX:
        delta = INT32_MIN if delta < 0 else INT32_MAX
    return delta


class WireRecords:
    """Records that passed :func:`check_wire`, ready to be stamped and stored.

    ``blob`` is the records back to back; ``offsets`` the start of each; ``counts`` how many
    indexes each takes (a batch takes ``flag``); ``total`` their sum.
    """

    __slots__ = ("_heads", "blob", "counts", "offsets", "total")
    blob: bytes
    offsets: tuple[int, ...]
    counts: tuple[int, ...]
    total: int

    def __init__(
        self, blob: bytes, offsets: Sequence[int], counts: Sequence[int], heads: Sequence[_Head]
    ) -> None:
        setattr_ = object.__setattr__
        setattr_(self, "blob", blob)
        setattr_(self, "offsets", tuple(offsets))
        setattr_(self, "counts", tuple(counts))
        setattr_(self, "total", sum(counts))
        setattr_(self, "_heads", tuple(heads))

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"WireRecords is immutable (setting {name})")

    def __len__(self) -> int:
        return len(self.offsets)

    @property
    def sys_codes(self) -> tuple[int, ...]:
        """The sysCode of each record, as sent."""
        return tuple(head[5] for head in self._heads)

    @property
    def send_times(self) -> tuple[int, ...]:
        """The sendTime of each record."""
        return tuple(head[8] for head in self._heads)

    def stamp(
        self, *, partition: int, now_ms: int, client_address: str | None = None, first: int = 0
    ) -> bytes:
        """The blob with every record's partition, index (from ``first`` on), term
        (:data:`~brokers.engine.record.STORE_TERM`), storeTime (``now_ms`` - sendTime,
        clamped to an INT) and, given ``client_address``, clientIp and sysCode bit 7
        rewritten; every other byte is kept (jmq4.md §3)."""
        buf = bytearray(self.blob)
        pack = _STAMP.pack_into
        keep, add, ip = _address_stamp(client_address)
        index = first
        try:
            for offset, head, count in zip(self.offsets, self._heads, self.counts, strict=True):
                _, _, _, _, magic, sys_code, priority, client_ip, send, _, _, _, _ = head
                pack(buf, offset + 4, partition, index, STORE_TERM, magic, sys_code & keep | add,
                     priority, ip or client_ip, send, _store_delta(now_ms, send))  # fmt: skip
                index += count
        except struct.error as exc:
            raise InvalidMessage(f"cannot stamp records: {exc}") from None
        return bytes(buf)

    def records(self, stamped: bytes) -> list[tuple[bytes, int]]:
        """``stamped`` (from :meth:`stamp`) split into ``(record, count)`` pairs."""
        ends = (*self.offsets[1:], len(stamped))
        return [
            (stamped[start:end], count)
            for start, end, count in zip(self.offsets, ends, self.counts, strict=True)
        ]


class StampedWire(NamedTuple):
    """What :func:`stamp_wire` made: the stamped records, the indexes each takes, their sum."""

    blob: bytes
    counts: list[int]
    total: int


def stamp_wire(
    wire: WireBlob,
    max_body: int,
    *,
    partition: int,
    now_ms: int,
    client_address: str | None = None,
    first: int = 0,
) -> StampedWire:
    """:func:`check_wire` and :meth:`WireRecords.stamp` in ONE walk: each record is checked
    (raising as :func:`check_wire` does) and stamped in a copy of the blob as it is passed."""
    keep, add, ip = _address_stamp(client_address)
    buf = bytearray(wire.blob)
    _, counts, _ = _walk(
        wire.blob, wire.count, max_body, (buf, partition, now_ms, keep, add, ip, first)
    )
    return StampedWire(bytes(buf), counts, sum(counts))


def check_wire(blob: bytes, count: int, max_body: int) -> WireRecords:
    """Validate ``count`` records filling ``blob`` exactly, with :func:`check_record`'s rules.

    Raises :class:`InvalidMessage` when a record's size disagrees with its content, the magic
    is wrong, sysCode bits 13–15 are set, businessId or app is not UTF-8, the businessId is
    over 100 characters, a batch has a flag under 1 or an uncompressed batch body does not
    add up to ``flag`` items, or the records do not fill the blob; :class:`MessageTooLarge`
    for a body over ``max_body``.

    The part after the body (businessId, attributes, extension, app) is walked once per
    distinct value: a record whose bytes there repeat an already checked tail is not
    walked again.
    """
    blob = bytes(blob)
    heads, counts, offsets = _walk(blob, count, max_body, None)
    return WireRecords(blob, offsets, counts, heads)


_Stamp = tuple[bytearray, int, int, int, int, bytes, int]


def _walk(
    blob: bytes, count: int, max_body: int, stamp: _Stamp | None
) -> tuple[list[_Head], list[int], list[int]]:
    """The walk of :func:`check_wire`: (heads, counts, offsets) of the records. With
    ``stamp`` (buffer, partition, now, sysCode mask and bits, clientIp, first index) each
    record is stamped into the buffer instead, and heads and offsets stay empty."""
    n = len(blob)
    if count < 1:
        raise InvalidMessage("no messages")
    offsets: list[int] = []
    heads: list[_Head] = []
    batches: dict[int, int] = {}  # record number -> items, for batch records
    unpack = _HEAD.unpack_from
    tail = b""  # the last checked tail (a valid one is never empty)
    pos = 0
    if stamp is not None:
        buf, partition, now_ms, keep, add, ip, index = stamp
        pack = _STAMP.pack_into
    try:
        for i in range(count):
            if pos + _HEAD_SIZE > n:
                raise InvalidMessage("malformed message record")
            head = unpack(blob, pos)
            size, _, _, _, magic, sys_code, priority, client_ip, send, _, _, flag, blen = head
            if blen < 0:
                raise InvalidMessage("body length out of range")
            body_end = pos + _HEAD_SIZE + blen
            end = body_end + len(tail)
            long_bid = False
            if not tail or blob[body_end:end] != tail:
                end, long_bid = _walk_tail(blob, body_end)
                tail = blob[body_end:end]
            if not (
                size == end - pos
                and end <= n
                and magic == MAGIC
                and 0 <= sys_code < SYS_BATCH  # no reserved bit (13-15), no batch
                and blen <= max_body
                and not long_bid
            ):
                # a batch record, or one this raises for
                _check_record_rules(blob, pos, head, end, n, long_bid, max_body)
                batches[i] = flag
            if stamp is None:
                offsets.append(pos)
                heads.append(head)
            else:
                pack(buf, pos + 4, partition, index, STORE_TERM, magic, sys_code & keep | add,
                     priority, ip or client_ip, send, _store_delta(now_ms, send))  # fmt: skip
                index += flag if i in batches else 1
            pos = end
    except (struct.error, IndexError, UnicodeDecodeError) as exc:
        raise InvalidMessage("malformed message record") from exc
    if pos != n:
        raise InvalidMessage(f"{n - pos} bytes after the {count} records")
    counts = [batches.get(i, 1) for i in range(count)] if batches else [1] * count
    return heads, counts, offsets


def _check_record_rules(
    blob: bytes, pos: int, head: _Head, end: int, n: int, long_bid: bool, max_body: int
) -> None:
    """The rules of :func:`check_record` for a walked record in their order: raise for the
    first one broken; return for a valid batch record."""
    size, _, _, _, magic, sys_code, _, _, _, _, _, flag, blen = head
    if size != end - pos or end > n:
        raise InvalidMessage("message size disagrees with its content")
    if magic != MAGIC:
        raise InvalidMessage("bad magic")
    if sys_code < 0 or sys_code >> 13:
        raise InvalidMessage("sysCode bits 13-15 must be clear")
    if blen > max_body:
        raise MessageTooLarge(f"body of {blen} bytes is over {max_body}")
    if long_bid:
        raise InvalidMessage("businessId longer than 100 characters")
    if flag < 1:
        raise InvalidMessage("batch flag must be at least 1")
    if not sys_code & SYS_COMPRESSED:
        body_start = pos + _HEAD_SIZE
        check_batch_body(blob, body_start, body_start + blen, flag)


def wire_records(records: Sequence[bytes], max_body: int) -> WireRecords:
    """:func:`check_wire` for separate records; each must span its own bytes exactly."""
    wire = check_wire(b"".join(records), len(records), max_body)
    pos = 0
    for record, offset in zip(records, wire.offsets, strict=True):
        if offset != pos:
            raise InvalidMessage("message size disagrees with its content")
        pos += len(record)
    return wire


def check_batch_body(blob: bytes, start: int, end: int, count: int) -> None:
    """:func:`~brokers.engine.record.decode_batch_body`'s verdict on ``blob[start:end]``
    holding ``count`` items, without building them (InvalidMessage when it would raise).

    Each item's businessId and attributes are checked once per distinct value: an item whose
    bytes after its body repeat the previous item's are not parsed again. Attributes are
    only parsed when they hold a ``\\u`` escape, the one thing the parser can refuse.
    """
    pos, items = start, 0
    tail = b""  # the last checked businessId + attributes (a valid one is never empty)
    try:
        while pos < end:
            (size,) = _I32.unpack_from(blob, pos)
            (blen,) = _I32.unpack_from(blob, pos + 7)
            item_end = pos + size
            body_end = pos + 11 + blen
            if size < 14 or item_end > end or blen < 0 or body_end > item_end:
                raise InvalidMessage("batch item size out of range")
            if not tail or blob[body_end:item_end] != tail:
                _check_item_strings(blob, body_end, item_end)
                tail = blob[body_end:item_end]
            items += 1
            pos = item_end
    except (struct.error, IndexError, UnicodeDecodeError) as exc:
        raise InvalidMessage("malformed batch body") from exc
    if items != count:
        raise InvalidMessage(f"batch has {items} items, flag says {count}")


def _check_item_strings(blob: bytes, p: int, end: int) -> None:
    """businessId (UTF-8, unsigned length) and attributes must fill ``blob[p:end]`` exactly."""
    bl = blob[p]
    p += 1
    blob[p : p + bl].decode("utf-8")
    p += bl
    (al,) = _I16.unpack_from(blob, p)
    p += 2
    if al < 0 or p + al != end:
        raise InvalidMessage("batch item fields do not add up to its size")
    check_properties(blob[p:end])


def _walk_tail(blob: bytes, p: int) -> tuple[int, bool]:
    """Walk businessId, attributes, extension and app from the body's end ``p``: (their end,
    whether the businessId is over 100 characters).

    Raises what :func:`check_record` raises for a negative length or a businessId or app that
    is not UTF-8 (struct, index and UTF-8 errors are the caller's to translate).
    """
    bl = blob[p]
    if bl > 127:
        raise InvalidMessage("negative businessId length")
    p += 1
    long_bid = False
    if bl:
        long_bid = len(blob[p : p + bl].decode("utf-8")) > MAX_BUSINESS_ID
        p += bl
    (al,) = _I16.unpack_from(blob, p)
    if al < 0:
        raise InvalidMessage("negative attributes length")
    attributes = blob[p + 2 : p + 2 + al]
    p += 2 + al
    (el,) = _I32.unpack_from(blob, p)
    if el < 0:
        raise InvalidMessage("negative extension length")
    check_properties(joined_properties(attributes, blob[p + 4 : p + 4 + el]))
    p += 4 + el
    apl = blob[p]
    if apl > 127:
        raise InvalidMessage("negative app length")
    p += 1
    if apl:
        blob[p : p + apl].decode("utf-8")
    return p + apl, long_bid
