"""Bounds-checked readers and writers for the JMQ4 primitive types (spec §1).

All integers are big-endian two's complement. S1/S2 strings carry a signed 1-/2-byte length;
length 0 means null or empty, which this codec represents as ``""``. Any negative length or
array count is a :class:`DecodeError`; the writer refuses strings and counts that the Java
reader would misparse.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from brokers.protocols.jmq4.errors import DecodeError, EncodeError

T = TypeVar("T")

S1_MAX = 127
S2_MAX = 32767
COUNT_MAX = 32767
BYTES4_MAX = 2**31 - 1

_BYTE = struct.Struct(">b")
_UBYTE = struct.Struct(">B")
_SHORT = struct.Struct(">h")
_INT = struct.Struct(">i")
_LONG = struct.Struct(">q")
_DOUBLE = struct.Struct(">d")


def _utf8(raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DecodeError(f"invalid UTF-8 string: {exc.reason}") from None


class Reader:
    """Sequential reader over an immutable byte string, confined to ``[start, end)``."""

    __slots__ = ("_data", "_end", "_pos")

    def __init__(self, data: bytes, start: int = 0, end: int | None = None) -> None:
        self._data = data
        self._pos = start
        self._end = len(data) if end is None else end

    @property
    def position(self) -> int:
        """Offset of the next unread byte within the underlying data."""
        return self._pos

    @property
    def remaining(self) -> int:
        """Bytes left before the end bound."""
        return self._end - self._pos

    def _take(self, n: int) -> int:
        pos = self._pos
        end = pos + n
        if end > self._end:
            raise DecodeError(f"read of {n} bytes at offset {pos} overruns the data ({self._end})")
        self._pos = end
        return pos

    def read_byte(self) -> int:
        """Read a signed BYTE."""
        return _BYTE.unpack_from(self._data, self._take(1))[0]

    def read_ubyte(self) -> int:
        """Read an unsigned byte (0–255)."""
        return self._data[self._take(1)]

    def read_bool(self) -> bool:
        """Read a BOOL; any non-zero byte is true."""
        return self._data[self._take(1)] != 0

    def read_short(self) -> int:
        """Read a signed SHORT."""
        return _SHORT.unpack_from(self._data, self._take(2))[0]

    def read_int(self) -> int:
        """Read a signed INT."""
        return _INT.unpack_from(self._data, self._take(4))[0]

    def read_long(self) -> int:
        """Read a signed LONG."""
        return _LONG.unpack_from(self._data, self._take(8))[0]

    def read_double(self) -> float:
        """Read an IEEE-754 binary64 DOUBLE."""
        return _DOUBLE.unpack_from(self._data, self._take(8))[0]

    def unpack(self, fmt: struct.Struct) -> tuple[Any, ...]:
        """Read a fixed-layout group of fields in one step."""
        return fmt.unpack_from(self._data, self._take(fmt.size))

    def read_raw(self, n: int) -> bytes:
        """Read exactly ``n`` raw bytes."""
        if n < 0:
            raise DecodeError(f"negative length {n}")
        pos = self._take(n)
        return self._data[pos : pos + n]

    def read_s1(self) -> str:
        """Read an S1 string (signed 1-byte length)."""
        n = self.read_byte()
        if n < 0:
            raise DecodeError(f"negative S1 length {n}")
        return _utf8(self.read_raw(n)) if n else ""

    def read_s2(self) -> str:
        """Read an S2 string (signed 2-byte length)."""
        n = self.read_short()
        if n < 0:
            raise DecodeError(f"negative S2 length {n}")
        return _utf8(self.read_raw(n)) if n else ""

    def read_bytes4(self) -> bytes:
        """Read BYTES4: an INT length then that many bytes."""
        n = self.read_int()
        if n < 0:
            raise DecodeError(f"negative BYTES4 length {n}")
        return self.read_raw(n)

    def read_count(self) -> int:
        """Read an array count (SHORT, must be ≥ 0)."""
        n = self.read_short()
        if n < 0:
            raise DecodeError(f"negative array count {n}")
        return n

    def read_array(self, read_item: Callable[[Reader], T]) -> tuple[T, ...]:
        """Read ``A{…}``: a count, then that many items produced by ``read_item``."""
        return tuple([read_item(self) for _ in range(self.read_count())])

    def window(self) -> tuple[bytes, int, int]:
        """``(data, position, end)`` for a hot-path parser that walks the bytes itself."""
        return self._data, self._pos, self._end

    def seek(self, position: int) -> None:
        """Move to ``position`` (after a :meth:`window` parse); it must stay within bounds."""
        if not self._pos <= position <= self._end:
            raise DecodeError(f"seek to {position} outside [{self._pos}, {self._end}]")
        self._pos = position

    def slice(self, start: int, end: int) -> bytes:
        """Return already-read bytes ``[start, end)`` of the underlying data."""
        return self._data[start:end]


class Writer:
    """Append-only encoder; every method validates its value before writing."""

    __slots__ = ("_buf",)

    def __init__(self) -> None:
        self._buf = bytearray()

    def __len__(self) -> int:
        return len(self._buf)

    def getvalue(self) -> bytes:
        """Return everything written so far."""
        return bytes(self._buf)

    def _pack(self, fmt: struct.Struct, value: object, name: str) -> None:
        try:
            self._buf += fmt.pack(value)
        except struct.error as exc:
            raise EncodeError(f"{name} value {value!r} not encodable: {exc}") from None

    def write_byte(self, value: int) -> None:
        """Write a signed BYTE (−128…127)."""
        self._pack(_BYTE, value, "BYTE")

    def write_ubyte(self, value: int) -> None:
        """Write an unsigned byte (0…255)."""
        self._pack(_UBYTE, value, "unsigned BYTE")

    def write_bool(self, value: bool) -> None:
        """Write a BOOL as 1 or 0."""
        self._buf.append(1 if value else 0)

    def write_short(self, value: int) -> None:
        """Write a signed SHORT."""
        self._pack(_SHORT, value, "SHORT")

    def write_int(self, value: int) -> None:
        """Write a signed INT."""
        self._pack(_INT, value, "INT")

    def write_long(self, value: int) -> None:
        """Write a signed LONG."""
        self._pack(_LONG, value, "LONG")

    def write_double(self, value: float) -> None:
        """Write a DOUBLE."""
        self._pack(_DOUBLE, value, "DOUBLE")

    def write_raw(self, data: bytes) -> None:
        """Write raw bytes with no prefix."""
        self._buf += data

    def _string(self, value: str | None, limit: int, name: str) -> bytes:
        if not value:
            return b""
        try:
            raw = value.encode("utf-8")
        except (UnicodeEncodeError, AttributeError) as exc:
            raise EncodeError(f"{name} value {value!r} not encodable: {exc}") from None
        if len(raw) > limit:
            raise EncodeError(f"{name} string of {len(raw)} bytes exceeds {limit} bytes")
        return raw

    def write_s1(self, value: str | None) -> None:
        """Write an S1 string; ``None`` and ``""`` are both length 0; >127 bytes is refused."""
        raw = self._string(value, S1_MAX, "S1")
        self._buf.append(len(raw))
        self._buf += raw

    def write_s2(self, value: str | None) -> None:
        """Write an S2 string; ``None`` and ``""`` are both length 0; >32767 bytes is refused."""
        raw = self._string(value, S2_MAX, "S2")
        self._buf += _SHORT.pack(len(raw))
        self._buf += raw

    def write_bytes4(self, data: bytes | None) -> None:
        """Write BYTES4; ``None`` is written as length 0."""
        data = data or b""
        if len(data) > BYTES4_MAX:
            raise EncodeError(f"BYTES4 value of {len(data)} bytes is too long")
        self._buf += _INT.pack(len(data))
        self._buf += data

    def write_count(self, count: int) -> None:
        """Write an array count (0…32767)."""
        if not 0 <= count <= COUNT_MAX:
            raise EncodeError(f"array count {count} outside 0…{COUNT_MAX}")
        self._buf += _SHORT.pack(count)

    def write_array(self, items: Sequence[T], write_item: Callable[[Writer, T], None]) -> None:
        """Write ``A{…}``: the item count, then each item through ``write_item``."""
        self.write_count(len(items))
        for item in items:
            write_item(self, item)
