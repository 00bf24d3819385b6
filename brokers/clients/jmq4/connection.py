"""One JMQ4 client connection: request/response matching by requestId over asyncio streams."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time

from brokers.protocols.jmq4 import (
    CURRENT_VERSION,
    BooleanAck,
    Code,
    CommandType,
    Direction,
    FatalError,
    Frame,
    FrameDecoder,
    Header,
    MalformedFrame,
    Payload,
    QosLevel,
    encode_frame,
)


class Jmq4Error(Exception):
    """A request answered with a non-zero status (BooleanAck) or a failed connection."""

    def __init__(self, code: int, message: str = "") -> None:
        super().__init__(f"{int(code)}: {message}" if message else str(int(code)))
        self.code = int(code)
        self.message = message


class Jmq4Connection:
    """A connection to one broker; requests may be in flight concurrently."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[Frame]] = {}
        self._decoder = FrameDecoder()
        self._task = asyncio.get_running_loop().create_task(self._read_loop())
        self.closed = False

    @classmethod
    async def open(cls, host: str, port: int, *, time_limit: float = 5.0) -> Jmq4Connection:
        """Connect to ``host:port``."""
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), time_limit)
        return cls(reader, writer)

    async def _read_loop(self) -> None:
        error: Exception = Jmq4Error(Code.CN_CONNECTION_ERROR, "connection closed")
        try:
            while data := await self._reader.read(1 << 16):
                self._decoder.feed(data)
                for event in self._decoder:
                    if isinstance(event, FatalError):
                        raise Jmq4Error(Code.CN_DECODE_ERROR, event.reason)
                    if isinstance(event, (Frame, MalformedFrame)):
                        fut = self._pending.pop(event.header.request_id, None)
                        if fut is None or fut.done():
                            continue
                        if isinstance(event, MalformedFrame):
                            fut.set_exception(Jmq4Error(Code.CN_DECODE_ERROR, event.reason))
                        else:
                            fut.set_result(event)
        except (OSError, Jmq4Error) as exc:
            error = (
                exc if isinstance(exc, Jmq4Error) else Jmq4Error(Code.CN_CONNECTION_ERROR, str(exc))
            )
        finally:
            self.closed = True
            for fut in self._pending.values():
                if not fut.done():
                    fut.set_exception(error)
            self._pending.clear()

    def _header(self, type_: int, qos: QosLevel, version: int) -> Header:
        return Header(
            version=version,
            direction=Direction.REQUEST,
            qos=qos,
            request_id=next(self._ids) & 0x7FFFFFFF,
            type=type_,
            send_time=time.time_ns() // 1_000_000,
        )

    async def request(
        self,
        payload: Payload,
        *,
        version: int = CURRENT_VERSION,
        time_limit: float = 10.0,
        check: bool = True,
    ) -> Frame:
        """Send ``payload`` and wait for its reply; a non-zero status raises :class:`Jmq4Error`."""
        if self.closed:
            raise Jmq4Error(Code.CN_CONNECTION_ERROR, "connection closed")
        header = self._header(payload.TYPE, QosLevel.RECEIVE, version)
        fut: asyncio.Future[Frame] = asyncio.get_running_loop().create_future()
        self._pending[header.request_id] = fut
        self._writer.write(encode_frame(header, payload))
        try:
            async with asyncio.timeout(time_limit):  # no wrapper per request, unlike wait_for
                frame = await fut
        finally:
            self._pending.pop(header.request_id, None)
        if check and frame.header.type == CommandType.BOOLEAN_ACK and frame.header.status:
            raise Jmq4Error(frame.header.status, frame.header.error)
        if (
            check
            and frame.header.type != CommandType.BOOLEAN_ACK
            and isinstance(frame.payload, BooleanAck)
        ):
            raise Jmq4Error(frame.header.status, frame.header.error)
        return frame

    def send_one_way(self, payload: Payload, *, version: int = CURRENT_VERSION) -> None:
        """Send ``payload`` with QoS ONE_WAY; no reply will come."""
        header = self._header(payload.TYPE, QosLevel.ONE_WAY, version)
        self._writer.write(encode_frame(header, payload))

    async def drain(self) -> None:
        """Wait until the write buffer is flushed."""
        await self._writer.drain()

    async def close(self) -> None:
        """Close the connection."""
        self.closed = True
        self._writer.close()
        with contextlib.suppress(Exception):
            await self._writer.wait_closed()
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self._task
