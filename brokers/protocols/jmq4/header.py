"""The JMQ4 frame header (spec §2).

Layout after the 4-byte frame length: magic INT, version BYTE, identity BYTE (bit0 direction,
bits1–2 QoS), requestId INT, type BYTE, sendTime LONG, and for responses only status
(unsigned BYTE) and error S2. A request header is 23 bytes including the length field, a
response header 26 + len(error).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, replace
from enum import IntEnum

from brokers.protocols.jmq4.codes import Code, CommandType
from brokers.protocols.jmq4.errors import DecodeError, EncodeError
from brokers.protocols.jmq4.primitives import Reader, Writer

MAGIC = 0xCAFEBEBE
MAGIC_BYTES = MAGIC.to_bytes(4, "big")
REQUEST_HEADER_SIZE = 23
MIN_VERSION = 1
MAX_VERSION = 4
CURRENT_VERSION = 4

_COMMAND_TYPES = {member.value: member for member in CommandType}
_CODES = {member.value: member for member in Code}
# magic, version, identity, requestId, type, sendTime
_FIXED = struct.Struct(">IbBibq")


class Direction(IntEnum):
    """Identity bit0."""

    REQUEST = 0
    RESPONSE = 1


class QosLevel(IntEnum):
    """Acknowledgement level. The header carries 0–3 in two bits; ALL is sent there as 0."""

    ONE_WAY = 0
    RECEIVE = 1
    PERSISTENCE = 2
    REPLICATION = 3
    ALL = 4


_QOS_BITS = (QosLevel.ONE_WAY, QosLevel.RECEIVE, QosLevel.PERSISTENCE, QosLevel.REPLICATION)


@dataclass(frozen=True, slots=True)
class Header:
    """A decoded or to-be-encoded frame header (the length field is computed on encode).

    ``type`` is a :class:`CommandType` when known, otherwise the raw signed byte value.
    ``status`` and ``error`` only exist on the wire for responses.
    """

    version: int
    direction: Direction
    qos: QosLevel
    request_id: int
    type: int
    send_time: int
    status: int = 0
    error: str = ""

    @property
    def is_response(self) -> bool:
        """True when identity bit0 marks a response."""
        return self.direction == Direction.RESPONSE

    @property
    def one_way(self) -> bool:
        """True when no response may be sent (QoS ONE_WAY on the wire)."""
        return self.qos in (QosLevel.ONE_WAY, QosLevel.ALL)

    def write(self, w: Writer) -> None:
        """Write the header from ``magic`` on (the caller writes the frame length first)."""
        if not MIN_VERSION <= self.version <= MAX_VERSION:
            raise EncodeError(f"header version {self.version} outside {MIN_VERSION}–{MAX_VERSION}")
        qos_bits = int(self.qos) if 0 <= self.qos <= QosLevel.REPLICATION else 0
        w.write_raw(MAGIC_BYTES)
        w.write_byte(self.version)
        w.write_byte((self.direction & 1) | (qos_bits << 1))
        w.write_int(self.request_id)
        w.write_byte(self.type)
        w.write_long(self.send_time)
        if self.direction == Direction.RESPONSE:
            if self.status not in _CODES or self.status > 255:
                raise EncodeError(f"status {self.status!r} is not a JMQ4 code that fits a byte")
            w.write_ubyte(self.status)
            w.write_s2(self.error)

    @classmethod
    def read_fixed(cls, r: Reader) -> Header:
        """Read the part common to requests and responses, from ``magic`` to ``sendTime``.

        For a response, follow with :meth:`read_response_fields`.
        """
        magic, version, identity, request_id, raw_type, send_time = r.unpack(_FIXED)
        if magic != MAGIC:
            raise DecodeError(f"bad magic 0x{magic:08x}")
        if not MIN_VERSION <= version <= MAX_VERSION:
            raise DecodeError(f"unsupported header version {version}")
        return cls(
            version=version,
            direction=Direction(identity & 1),
            qos=_QOS_BITS[(identity >> 1) & 3],
            request_id=request_id,
            type=_COMMAND_TYPES.get(raw_type, raw_type),
            send_time=send_time,
        )

    def read_response_fields(self, r: Reader) -> Header:
        """Return this header completed with the response-only ``status`` and ``error``."""
        status = r.read_ubyte()
        return replace(self, status=_CODES.get(status, status), error=r.read_s2())
