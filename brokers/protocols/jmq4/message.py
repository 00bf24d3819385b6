"""The BrokerMessage wire/storage format (spec §3) and its sysCode and clientIp fields.

A decoded :class:`BrokerMessage` keeps the exact bytes it was read from in ``raw`` so the
broker can store them verbatim; :func:`rewrite_message` patches the fields the store owns
(partition, index, term, clientIp + sysCode bit7, storeTime) at their fixed offsets.
"""

from __future__ import annotations

import ipaddress
import struct
from dataclasses import dataclass, field, fields
from enum import IntEnum

from brokers.protocols.jmq4.attributes import decode_attributes
from brokers.protocols.jmq4.errors import DecodeError, EncodeError
from brokers.protocols.jmq4.primitives import Reader, Writer

MESSAGE_MAGIC = 0x1234
MESSAGE_FIXED_SIZE = 73
CLIENT_IP_SIZE = 16
DEFAULT_SYS_CODE = 0x018C
"""A plain message from the Java client: version 1, short address, source JOYQUEUE."""

SYS_COMPRESSED = 1 << 0
SYS_ORDERED = 1 << 1
SYS_SHORT_ADDRESS = 1 << 7
SYS_BATCH = 1 << 12
SYS_RESERVED_MASK = 0xE000
"""Bits 13–15; they must be clear (§3.1)."""

# size, partition, index, term, magic, sysCode, priority, clientIp, sendTime, storeTime,
# bodyCRC, flag: the 61 fixed bytes that precede the body.
_FIXED = struct.Struct(">ihqihhb16sqiqh")
_OFFSET_PARTITION = 4
_OFFSET_INDEX = 6
_OFFSET_TERM = 14
_OFFSET_SYS_CODE = 20
_OFFSET_CLIENT_IP = 23
_OFFSET_STORE_TIME = 47


class Source(IntEnum):
    """sysCode bits 2–3."""

    JMQ = 0
    KAFKA = 1
    MQTT = 2
    JOYQUEUE = 3


class CompressionType(IntEnum):
    """sysCode bits 4–6 (bits 4–5 in message version 0)."""

    NONE = 0
    ZIP = 1
    ZLIB = 2
    SNAPPY = 3


_COMPRESSION_TYPES = {member.value: member for member in CompressionType}


@dataclass(frozen=True, slots=True, kw_only=True)
class SysCode:
    """The decoded sysCode bit field (§3.1)."""

    compressed: bool = False
    ordered: bool = False
    source: int = Source.JOYQUEUE
    compression: int = CompressionType.NONE
    short_address: bool = True
    version: int = 1
    batch: bool = False

    @classmethod
    def decode(cls, value: int) -> SysCode:
        """Interpret a sysCode SHORT; version 0 has a 2-bit compression field and IPv4 only."""
        value &= 0xFFFF
        version = (value >> 8) & 0xF
        compressed = bool(value & SYS_COMPRESSED)
        compression = (value >> 4) & (0x3 if version == 0 else 0x7) if compressed else 0
        return cls(
            compressed=compressed,
            ordered=bool(value & SYS_ORDERED),
            source=Source((value >> 2) & 0x3),
            compression=_COMPRESSION_TYPES.get(compression, compression),
            short_address=True if version == 0 else bool(value & SYS_SHORT_ADDRESS),
            version=version,
            batch=bool(value & SYS_BATCH),
        )

    def encode(self) -> int:
        """The signed SHORT value; compression is only written for compressed messages."""
        if not (0 <= self.source <= 3 and 0 <= self.compression <= 7 and 0 <= self.version <= 15):
            raise EncodeError(f"sysCode field out of range: {self!r}")
        value = (
            (SYS_COMPRESSED if self.compressed else 0)
            | (SYS_ORDERED if self.ordered else 0)
            | self.source << 2
            | (self.compression << 4 if self.compressed else 0)
            | (SYS_SHORT_ADDRESS if self.short_address else 0)
            | self.version << 8
            | (SYS_BATCH if self.batch else 0)
        )
        return value


def encode_client_address(host: str, port: int) -> tuple[bytes, bool]:
    """Build the 16-byte clientIp field for a peer and tell whether it is a short (IPv4) one.

    The layout is port low byte, port high byte, then the address bytes, zero-padded; an IPv6
    address is truncated to fit (reference behaviour). IPv4-mapped IPv6 peers count as IPv4.
    """
    try:
        address = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError as exc:
        raise EncodeError(str(exc)) from None
    if not 0 <= port <= 0xFFFF:
        raise EncodeError(f"port {port} outside 0–65535")
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    packed = bytes((port & 0xFF, port >> 8)) + address.packed
    return packed[:CLIENT_IP_SIZE].ljust(CLIENT_IP_SIZE, b"\0"), address.version == 4


def decode_client_address(client_ip: bytes, short_address: bool) -> tuple[str, int]:
    """Return ``(host, port)`` from a clientIp field; IPv6 hosts miss their 2 truncated bytes."""
    if len(client_ip) != CLIENT_IP_SIZE:
        raise DecodeError(f"clientIp must be {CLIENT_IP_SIZE} bytes, got {len(client_ip)}")
    port = client_ip[0] | client_ip[1] << 8
    if short_address:
        return str(ipaddress.IPv4Address(client_ip[2:6])), port
    return str(ipaddress.IPv6Address(client_ip[2:] + b"\0\0")), port


@dataclass(frozen=True, kw_only=True)
class BrokerMessage:
    """One message in wire/storage layout (§3). Strings use ``""`` for null.

    ``size`` ``None`` means "compute on encode"; a decoded message keeps the declared value
    (check it with :func:`~brokers.protocols.jmq4.validation.validate_message`).
    ``attributes`` is the raw Properties text; see :meth:`attribute_map`.
    ``raw`` holds the exact decoded bytes (empty for a constructed message); it is not part
    of equality and is dropped by :func:`dataclasses.replace`.
    """

    size: int | None = None
    partition: int = -1
    index: int = 0
    term: int = 0
    magic: int = MESSAGE_MAGIC
    sys_code: int = DEFAULT_SYS_CODE
    priority: int = 0
    client_ip: bytes = bytes(CLIENT_IP_SIZE)
    send_time: int = 0
    store_time: int = 0
    body_crc: int = 0
    flag: int = 0
    body: bytes = b""
    business_id: str = ""
    attributes: str = ""
    extension: bytes = b""
    app: str = ""
    raw: bytes = field(default=b"", init=False, repr=False, compare=False)

    @property
    def encoded_size(self) -> int:
        """The size this message actually occupies on the wire."""
        if self.raw:
            return len(self.raw)
        return (
            MESSAGE_FIXED_SIZE
            + len(self.body)
            + len(self.business_id.encode("utf-8", "surrogatepass"))
            + len(self.attributes.encode("utf-8", "surrogatepass"))
            + len(self.extension)
            + len(self.app.encode("utf-8", "surrogatepass"))
        )

    @property
    def flags(self) -> SysCode:
        """The decoded sysCode bit field."""
        return SysCode.decode(self.sys_code)

    def attribute_map(self) -> dict[str, str]:
        """The attributes parsed as Java Properties."""
        return decode_attributes(self.attributes)

    def client_address(self) -> tuple[str, int]:
        """``(host, port)`` recorded in clientIp."""
        return decode_client_address(self.client_ip, bool(self.sys_code & SYS_SHORT_ADDRESS))

    def to_bytes(self) -> bytes:
        """Encode the message (returns ``raw`` unchanged for a decoded message)."""
        if self.raw:
            return self.raw
        if len(self.client_ip) != CLIENT_IP_SIZE:
            raise EncodeError(f"clientIp must be {CLIENT_IP_SIZE} bytes, got {len(self.client_ip)}")
        w = Writer()
        w.write_int(0 if self.size is None else self.size)
        w.write_short(self.partition)
        w.write_long(self.index)
        w.write_int(self.term)
        w.write_short(self.magic)
        w.write_short(self.sys_code)
        w.write_byte(self.priority)
        w.write_raw(self.client_ip)
        w.write_long(self.send_time)
        w.write_int(self.store_time)
        w.write_long(self.body_crc)
        w.write_short(self.flag)
        w.write_bytes4(self.body)
        w.write_s1(self.business_id)
        w.write_s2(self.attributes)
        w.write_bytes4(self.extension)
        w.write_s1(self.app)
        data = w.getvalue()
        if self.size is None:
            data = len(data).to_bytes(4, "big") + data[4:]
        return data

    def write(self, w: Writer) -> None:
        """Append the encoded message to ``w``."""
        w.write_raw(self.to_bytes())

    @classmethod
    def read(cls, r: Reader) -> BrokerMessage:
        """Read one message field by field (as the reference does, ignoring ``size``).

        This is the produce hot path, so it walks the buffer directly instead of calling
        one Reader method per field; the bounds and sign checks are the Reader's.
        """
        data, start, end = r.window()
        if start + _FIXED_SIZE > end:
            raise DecodeError(
                f"read of {_FIXED_SIZE} bytes at offset {start} overruns the data ({end})"
            )
        fixed = _FIXED.unpack_from(data, start)
        pos = start + _FIXED_SIZE
        body, pos = _bytes4(data, pos, end)
        business_id, pos = _string(data, pos, end, 1)
        attributes, pos = _string(data, pos, end, 2)
        extension, pos = _bytes4(data, pos, end)
        app, pos = _string(data, pos, end, 1)
        r.seek(pos)
        message = object.__new__(cls)
        message.__dict__.update(
            zip(
                _FIELDS,
                (*fixed, body, business_id, attributes, extension, app, data[start:pos]),
                strict=True,
            )
        )
        return message

    @classmethod
    def from_bytes(cls, data: bytes) -> BrokerMessage:
        """Decode a bare message that must span ``data`` exactly (e.g. a stored message)."""
        r = Reader(bytes(data))
        message = cls.read(r)
        if r.remaining:
            raise DecodeError(f"{r.remaining} bytes after the message")
        return message


# BrokerMessage.read fills the frozen instance's fields in one step (no per-field
# object.__setattr__, which cost more than the parsing), in declaration order.
_FIELDS = tuple(f.name for f in fields(BrokerMessage))
_FIXED_SIZE = _FIXED.size
_LEN1, _LEN2, _LEN4 = struct.Struct(">b"), struct.Struct(">h"), struct.Struct(">i")


def _overrun(n: int, pos: int, end: int) -> DecodeError:
    return DecodeError(f"read of {n} bytes at offset {pos} overruns the data ({end})")


def _bytes4(data: bytes, pos: int, end: int) -> tuple[bytes, int]:
    if pos + 4 > end:
        raise _overrun(4, pos, end)
    (n,) = _LEN4.unpack_from(data, pos)
    if n < 0:
        raise DecodeError(f"negative BYTES4 length {n}")
    pos += 4
    if pos + n > end:
        raise _overrun(n, pos, end)
    return data[pos : pos + n], pos + n


def _string(data: bytes, pos: int, end: int, width: int) -> tuple[str, int]:
    if pos + width > end:
        raise _overrun(width, pos, end)
    (n,) = (_LEN1 if width == 1 else _LEN2).unpack_from(data, pos)
    if n < 0:
        raise DecodeError(f"negative S{width} length {n}")
    pos += width
    if not n:
        return "", pos
    if pos + n > end:
        raise _overrun(n, pos, end)
    try:
        return data[pos : pos + n].decode("utf-8"), pos + n
    except UnicodeDecodeError as exc:
        raise DecodeError(f"invalid UTF-8 string: {exc.reason}") from None


def write_message_item(w: Writer, message: BrokerMessage) -> None:
    """Array item writer for ``A{MSG}``."""
    message.write(w)


def rewrite_message(
    buf: bytearray,
    *,
    partition: int | None = None,
    index: int | None = None,
    term: int | None = None,
    store_time: int | None = None,
    client_address: tuple[str, int] | None = None,
) -> None:
    """Patch, in place, the fields the store owns on encoded message bytes (§3).

    ``None`` leaves a field unchanged. ``client_address`` (host, port) rewrites clientIp and
    sets sysCode bit7 to match; every other byte is kept exactly.
    """
    if len(buf) < MESSAGE_FIXED_SIZE:
        raise EncodeError(f"{len(buf)} bytes is shorter than any message")
    patches: list[tuple[int, bytes]] = []
    try:
        if partition is not None:
            patches.append((_OFFSET_PARTITION, struct.pack(">h", partition)))
        if index is not None:
            patches.append((_OFFSET_INDEX, struct.pack(">q", index)))
        if term is not None:
            patches.append((_OFFSET_TERM, struct.pack(">i", term)))
        if store_time is not None:
            patches.append((_OFFSET_STORE_TIME, struct.pack(">i", store_time)))
    except struct.error as exc:
        raise EncodeError(str(exc)) from None
    if client_address is not None:
        client_ip, short = encode_client_address(*client_address)
        patches.append((_OFFSET_CLIENT_IP, client_ip))
        low = buf[_OFFSET_SYS_CODE + 1]
        low = low | SYS_SHORT_ADDRESS if short else low & ~SYS_SHORT_ADDRESS
        patches.append((_OFFSET_SYS_CODE + 1, bytes((low,))))
    for offset, data in patches:
        buf[offset : offset + len(data)] = data
