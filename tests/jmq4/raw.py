"""Raw-socket helpers: send hand-built frames and read replies byte for byte."""

from __future__ import annotations

import asyncio
import struct
import time

from brokers.protocols.jmq4 import (
    AddConnectionRequest,
    Direction,
    Frame,
    Header,
    Payload,
    QosLevel,
    decode_frame,
    encode_frame,
)


def now_ms() -> int:
    """The current time in epoch ms, as a JMQ4 header's sendTime."""
    return time.time_ns() // 1_000_000


def request_header(
    type_: int,
    request_id: int = 7,
    *,
    version: int = 4,
    qos: QosLevel = QosLevel.RECEIVE,
    send_time: int | None = None,
) -> Header:
    """A request header sent now, or at ``send_time`` (brokers refuse old ones)."""
    return Header(
        version=version,
        direction=Direction.REQUEST,
        qos=qos,
        request_id=request_id,
        type=type_,
        send_time=now_ms() if send_time is None else send_time,
    )


def frame_bytes(payload: Payload, request_id: int = 7, **kw: object) -> bytes:
    """Encode ``payload`` as a request frame."""
    return encode_frame(request_header(payload.TYPE, request_id, **kw), payload)  # type: ignore[arg-type]


class RawClient:
    """A bare TCP connection speaking bytes."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, port: int) -> RawClient:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        return cls(reader, writer)

    def send(self, data: bytes) -> None:
        self.writer.write(data)

    async def read_raw(self, wait: float = 5.0) -> bytes:
        """One complete reply frame, as bytes."""
        head = await asyncio.wait_for(self.reader.readexactly(4), wait)
        (length,) = struct.unpack(">i", head)
        return head + await asyncio.wait_for(self.reader.readexactly(length - 4), wait)

    async def read(self, wait: float = 5.0) -> Frame:
        """One reply frame, decoded."""
        return decode_frame(await self.read_raw(wait))

    async def call(self, payload: Payload, request_id: int = 7, **kw: object) -> Frame:
        self.send(frame_bytes(payload, request_id, **kw))
        return await self.read()

    async def login(self, app: str, token: str) -> Frame:
        return await self.call(AddConnectionRequest(app=app, token=token), request_id=1)

    async def closed(self, wait: float = 5.0) -> bool:
        """True when the server closes the connection."""
        try:
            data = await asyncio.wait_for(self.reader.read(1), wait)
        except ConnectionError:
            return True
        except TimeoutError:
            return False
        return data == b""

    async def close(self) -> None:
        self.writer.close()
