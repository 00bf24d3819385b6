"""The messages of a PRODUCE_MESSAGE topic entry as one contiguous, lazily decoded sequence.

A producer's messages sit back to back in the frame. :func:`read_wire_messages` finds where
each one ends with ONE walk over the field lengths, exactly as :meth:`BrokerMessage.read`
reads them (and with its :class:`DecodeError` for a malformed message), without building
any message. :class:`WireMessages` keeps the contiguous bytes, each message's offset and the
facts the broker needs per message (partition, sendTime, sysCode, body length); indexing
decodes a :class:`BrokerMessage` on demand. It compares equal to a tuple of the same
messages and is written back as its bytes, unchanged.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator, Sequence
from typing import NoReturn, overload

from brokers.protocols.jmq4.errors import DecodeError
from brokers.protocols.jmq4.message import SYS_BATCH, SYS_COMPRESSED, BrokerMessage
from brokers.protocols.jmq4.primitives import Reader, Writer

# partition, sysCode, sendTime and the body length: the 65 bytes before the body (§3).
_FACTS = struct.Struct(">4xh14xh17xq14xi")
_FACTS_SIZE = _FACTS.size
_I32 = struct.Struct(">i")
_FLAG_BODY = struct.Struct(">hi")  # flag and the body length
_OFFSET_FLAG = 59
_ITEM_FIXED = 11  # itemSize INT, priority BYTE, flag SHORT, body length INT


class WireMessages(Sequence[BrokerMessage]):
    """An immutable sequence of messages held as their contiguous wire bytes.

    ``data`` is every message's bytes, back to back; ``offsets`` the start of each message
    in ``data`` plus its end. ``partitions``, ``send_times`` and ``sys_codes`` hold those
    fields per message; ``max_body_size`` is the largest body length.
    """

    __slots__ = ("data", "max_body_size", "offsets", "partitions", "send_times", "sys_codes")
    data: bytes
    offsets: tuple[int, ...]
    partitions: tuple[int, ...]
    send_times: tuple[int, ...]
    sys_codes: tuple[int, ...]
    max_body_size: int

    def __init__(
        self,
        data: bytes,
        offsets: Sequence[int],
        partitions: Sequence[int],
        send_times: Sequence[int],
        sys_codes: Sequence[int],
        max_body_size: int,
    ) -> None:
        setattr_ = object.__setattr__
        setattr_(self, "data", data)
        setattr_(self, "offsets", tuple(offsets))
        setattr_(self, "partitions", tuple(partitions))
        setattr_(self, "send_times", tuple(send_times))
        setattr_(self, "sys_codes", tuple(sys_codes))
        setattr_(self, "max_body_size", max_body_size)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"WireMessages is immutable (setting {name})")

    @classmethod
    def from_messages(cls, messages: Iterable[BrokerMessage]) -> WireMessages:
        """Encode messages (decoded ones are copied as they arrived) into a sequence."""
        encoded = [m.to_bytes() for m in messages]
        data = b"".join(encoded)
        return scan_messages(data, 0, len(data), len(encoded))[0]

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @overload
    def __getitem__(self, index: int) -> BrokerMessage: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[BrokerMessage, ...]: ...

    def __getitem__(self, index: int | slice) -> BrokerMessage | tuple[BrokerMessage, ...]:
        if isinstance(index, slice):
            return tuple(self[i] for i in range(*index.indices(len(self))))
        n = len(self)
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError("message index out of range")
        return BrokerMessage.read(Reader(self.data, self.offsets[index], self.offsets[index + 1]))

    def __iter__(self) -> Iterator[BrokerMessage]:
        for i in range(len(self)):
            yield self[i]

    def raw(self, index: int) -> bytes:
        """The wire bytes of message ``index``."""
        return self.data[self.offsets[index] : self.offsets[index + 1]]

    def batch_rejected(self, index: int) -> bool:
        """True when message ``index`` is a batch that §8.5 rejects: ``flag`` under 1, or an
        uncompressed body that does not split into exactly ``flag`` items (as
        :func:`~brokers.protocols.jmq4.validation.validate_batch` reads them)."""
        sys_code = self.sys_codes[index]
        if not sys_code & SYS_BATCH:
            return False
        start = self.offsets[index]
        flag, body_size = _FLAG_BODY.unpack_from(self.data, start + _OFFSET_FLAG)
        if flag < 1:
            return True
        if sys_code & SYS_COMPRESSED:
            return False
        body_start = start + _FACTS_SIZE
        return batch_item_count(self.data, body_start, body_start + body_size) != flag

    def __eq__(self, other: object) -> bool:
        if isinstance(other, WireMessages):
            # Decoded fields map one-to-one onto bytes, so equal bytes mean equal messages.
            return len(self) == len(other) and self.data == other.data
        if isinstance(other, tuple):
            return len(self) == len(other) and tuple(self) == other
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        return f"WireMessages({list(self)!r})"

    def write(self, w: Writer) -> None:
        """Append ``A{MSG}``: the count, then the bytes as they are."""
        w.write_count(len(self))
        w.write_raw(self.data)


def read_wire_messages(r: Reader) -> WireMessages:
    """Read ``A{MSG}`` from ``r`` with one walk (same framing and errors as the full decoder)."""
    count = r.read_count()
    data, start, end = r.window()
    messages, pos = scan_messages(data, start, end, count)
    r.seek(pos)
    return messages


def scan_messages(data: bytes, start: int, end: int, count: int) -> tuple[WireMessages, int]:
    """Walk ``count`` messages from ``start`` (bounded by ``end``); the sequence and its end.

    Every length is checked as :meth:`BrokerMessage.read` checks it, and the strings it
    would decode (businessId, attributes, app) must be UTF-8. On the first problem the
    message is re-read by :meth:`BrokerMessage.read`, which raises the reference's error.
    The part after the body (businessId … app) is walked once per distinct value: a message
    whose bytes there repeat the previous message's is not walked again.
    """
    offsets = [0]
    partitions: list[int] = []
    send_times: list[int] = []
    sys_codes: list[int] = []
    max_body = 0
    unpack = _FACTS.unpack_from
    tail = b""  # the last walked tail (a valid one is never empty)
    pos = start
    for _ in range(count):
        p = pos + _FACTS_SIZE
        if p > end:
            _fail(data, pos, end)
        partition, sys_code, send_time, n = unpack(data, pos)
        if n < 0:
            _fail(data, pos, end)
        if n > max_body:
            max_body = n
        p += n
        q = p + len(tail)
        if not tail or q > end or data[p:q] != tail:
            # businessId, attributes, extension and app differ from the previous message's
            q = _walk_tail(data, p, end, pos)
            tail = data[p:q]
        offsets.append(q - start)
        partitions.append(partition)
        send_times.append(send_time)
        sys_codes.append(sys_code)
        pos = q
    messages = WireMessages(data[start:pos], offsets, partitions, send_times, sys_codes, max_body)
    return messages, pos


def _walk_tail(data: bytes, p: int, end: int, pos: int) -> int:
    """Walk businessId, attributes, extension and app from the body's end ``p``; their end.

    ``pos`` is the message's start, where the full decoder re-reads it on a problem.
    """
    p = _skip_string(data, p, end, pos, 1)  # businessId
    p = _skip_string(data, p, end, pos, 2)  # attributes
    if p + 4 > end:
        _fail(data, pos, end)
    (n,) = _I32.unpack_from(data, p)
    p += 4 + n
    if n < 0:  # the extension
        _fail(data, pos, end)
    return _skip_string(data, p, end, pos, 1)  # app


def _skip_string(data: bytes, p: int, end: int, pos: int, width: int) -> int:
    """The end of the S1 (``width`` 1) or S2 (2) string at ``p``: a length that fits its
    signed type and the frame, and UTF-8 content, or the full decoder's error for the
    message at ``pos``."""
    if p + width > end:
        _fail(data, pos, end)
    n = data[p] if width == 1 else data[p] << 8 | data[p + 1]
    p += width
    if n:
        if n > (127 if width == 1 else 32767) or p + n > end or not _utf8(data[p : p + n]):
            _fail(data, pos, end)
        p += n
    return p


def batch_item_count(data: bytes, start: int, end: int) -> int | None:
    """How many items the batch body ``data[start:end]`` holds, or None if it does not split
    into items exactly as :func:`~brokers.protocols.jmq4.batch.decode_batch` reads them.

    Each item's businessId and attributes are checked once per distinct value: an item whose
    bytes after its body repeat the previous item's is not parsed again.
    """
    count, pos = 0, start
    tail = b""  # the last checked businessId + attributes (a valid one is never empty)
    unpack = _I32.unpack_from
    while pos < end:
        if pos + _ITEM_FIXED > end:
            return None
        (size,) = unpack(data, pos)
        (n,) = unpack(data, pos + 7)
        body_end = pos + _ITEM_FIXED + n
        item_end = pos + size
        if n < 0 or item_end > end or body_end > item_end:
            return None
        if not tail or data[body_end:item_end] != tail:
            if not _item_strings_fill(data, body_end, item_end):
                return None
            tail = data[body_end:item_end]
        count += 1
        pos = item_end
    return count


def _item_strings_fill(data: bytes, p: int, end: int) -> bool:
    """True when an S1 and an S2 string (lengths ≥ 0, UTF-8) fill ``data[p:end]`` exactly."""
    if p >= end:
        return False
    n = data[p]
    p += 1
    if n > 127 or p + n > end or (n and not _utf8(data[p : p + n])):
        return False
    p += n
    if p + 2 > end:
        return False
    n = data[p] << 8 | data[p + 1]
    p += 2
    if n > 32767 or p + n != end:
        return False
    return not n or _utf8(data[p:end])


def _utf8(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _fail(data: bytes, pos: int, end: int) -> NoReturn:
    """Raise the full decoder's error for the malformed message at ``pos``."""
    BrokerMessage.read(Reader(data, pos, end))
    raise DecodeError(f"malformed message at offset {pos}")  # pragma: no cover - walk == read
