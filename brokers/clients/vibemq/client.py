"""asyncio VibeMQ client over TCP: requests matched to replies by id, deliveries queued.

Every request gets a fresh id unless one is given; :meth:`VibeMQClient.request` waits for
the reply with that id and raises :class:`VibeMQServerError` for an ``error`` frame.
Deliveries arrive on :attr:`VibeMQClient.deliveries` as :class:`Received` values; the
client never acks on its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from dataclasses import dataclass
from typing import Any

import msgspec

from brokers.protocols.vibemq import (
    BASE64,
    Ack,
    Connect,
    CreateQueue,
    DeleteQueue,
    Deliver,
    Disconnect,
    Error,
    Frame,
    FrameDecoder,
    ListQueues,
    Ping,
    ProtocolError,
    Publish,
    PublishAck,
    QueueInfo,
    Subscribe,
    Unsubscribe,
    encode_frame,
)

CLIENT_VERSION = "mqcloud-python/1.0"


class VibeMQServerError(Exception):
    """The broker answered with an ``error`` frame."""

    def __init__(self, code: str, message: str, request_id: str | None) -> None:
        super().__init__(f"{code}: {message}")
        self.code, self.message, self.request_id = code, message, request_id


class ConnectionClosed(Exception):
    """The connection ended before the reply arrived."""


@dataclass(frozen=True, slots=True)
class Received:
    """One delivered message."""

    id: str
    queue: str
    payload: Any
    headers: dict[str, str]

    @property
    def attempts(self) -> int:
        return int(self.headers.get("deliveryAttempts", "1"))


def _json(value: Any) -> Any:
    if isinstance(value, msgspec.Raw):
        return msgspec.json.decode(value)
    return value


class VibeMQClient:
    """One VibeMQ TCP connection."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader, self._writer = reader, writer
        self._decoder = FrameDecoder(max_frame_size=1 << 30, accept_server_frames=True)
        self._pending: dict[str, asyncio.Future[Frame]] = {}
        self._ids = itertools.count(1)
        self._prefix = f"c{id(self):x}-"
        self.deliveries: asyncio.Queue[Received] = asyncio.Queue()
        self.errors: list[Error] = []
        self.server_disconnect: Disconnect | None = None
        self.closed = asyncio.Event()
        self._task = asyncio.create_task(self._read(), name="vibemq-client")

    @classmethod
    async def open(
        cls,
        host: str,
        port: int,
        token: str | None = None,
        *,
        connect: bool = True,
        client_id: str | None = None,
    ) -> VibeMQClient:
        """Connect to ``host:port`` and (unless ``connect`` is False) authenticate;
        ``client_id`` names a durable fan-out subscriber (see :meth:`connect`)."""
        reader, writer = await asyncio.open_connection(host, port)
        client = cls(reader, writer)
        if connect:
            await client.connect(token, client_id=client_id)
        return client

    async def __aenter__(self) -> VibeMQClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def next_id(self) -> str:
        return f"{self._prefix}{next(self._ids)}"

    # ---------------------------------------------------------------- I/O

    async def _read(self) -> None:
        try:
            while True:
                data = await self._reader.read(65536)
                if not data:
                    break
                for event in self._decoder.feed(data):
                    if isinstance(event, ProtocolError):
                        raise ConnectionClosed(str(event))
                    self._dispatch(event)
        except (ConnectionError, ConnectionClosed, OSError):
            pass
        finally:
            self.closed.set()
            for fut in self._pending.values():
                if not fut.done():
                    fut.set_exception(ConnectionClosed("connection closed"))
            self._pending.clear()

    def _dispatch(self, frame: Frame) -> None:
        if isinstance(frame, Deliver):
            self.deliveries.put_nowait(
                Received(frame.id, frame.queue, _json(frame.payload), dict(frame.headers))
            )
            return
        if isinstance(frame, Disconnect):
            self.server_disconnect = frame
            return
        fut = self._pending.pop(frame.id or "", None)
        if fut is not None and not fut.done():
            fut.set_result(frame)
        elif isinstance(frame, Error):
            self.errors.append(frame)

    def send(self, frame: Frame) -> None:
        """Write a frame without waiting for anything."""
        self._writer.write(encode_frame(frame))

    def send_raw(self, data: bytes) -> None:
        """Write raw bytes (tests of bad input)."""
        self._writer.write(data)

    async def request(self, frame: Frame, *, wait: float = 10.0) -> Frame:
        """Send ``frame`` and wait for the reply with its id."""
        fut = asyncio.get_running_loop().create_future()
        self._pending[frame.id] = fut
        self.send(frame)
        reply = await asyncio.wait_for(fut, wait)
        if isinstance(reply, Error):
            raise VibeMQServerError(reply.error_code, reply.error_message, reply.id)
        return reply

    # ---------------------------------------------------------------- commands

    async def connect(
        self, token: str | None = None, *, client_id: str | None = None
    ) -> dict[str, str]:
        """Authenticate. With ``client_id`` (broker extension ``headers.clientId``) this
        connection's FanOutWithAck copies belong to ``<app>#<client_id>``: they survive a
        reconnect, to any broker; without it they end with the connection."""
        headers = {"clientVersion": CLIENT_VERSION}
        if token:
            headers["authToken"] = token
        if client_id:
            headers["clientId"] = client_id
        reply = await self.request(Connect(id=self.next_id(), headers=headers))
        return dict(reply.headers)  # type: ignore[union-attr]

    async def ping(self) -> None:
        await self.request(Ping(id=self.next_id()))

    def _publish_frame(
        self,
        queue: str,
        payload: Any,
        headers: dict[str, str] | None,
        priority: str | None,
        message_id: str | None,
    ) -> Publish:
        hdrs = dict(headers or {})
        if priority is not None:
            hdrs["priority"] = priority
        raw = msgspec.Raw(msgspec.json.encode(payload))  # bytes: their base64
        encoding = BASE64 if isinstance(payload, bytes | bytearray | memoryview) else None
        return Publish(
            id=message_id or self.next_id(),
            queue=queue,
            payload=raw,
            encoding=encoding,
            headers=hdrs,
        )

    async def publish(
        self,
        queue: str,
        payload: Any,
        *,
        headers: dict[str, str] | None = None,
        priority: str | None = None,
        message_id: str | None = None,
    ) -> PublishAck:
        """Publish and wait for ``publishAck`` (the message is stored). A ``bytes``
        payload is the body as it is (sent as base64 with ``"encoding": "base64"``), and
        comes back to a subscriber of this client as ``bytes``."""
        frame = self._publish_frame(queue, payload, headers, priority, message_id)
        return await self.request(frame)  # type: ignore[return-value]

    async def subscribe(self, queue: str) -> None:
        await self.request(Subscribe(id=self.next_id(), queue=queue))

    async def unsubscribe(self, queue: str) -> None:
        await self.request(Unsubscribe(id=self.next_id(), queue=queue))

    def ack(self, message_id: str) -> None:
        """Acknowledge a delivery (documented form: ``headers.messageId``); no reply."""
        self.send(Ack(id=self.next_id(), headers={"messageId": message_id}))

    async def receive(self, wait: float = 10.0) -> Received:
        """The next delivery."""
        return await asyncio.wait_for(self.deliveries.get(), wait)

    async def create_queue(self, queue: str, **options: str) -> dict[str, Any]:
        """createQueue with option headers (``deliveryMode="FanOutWithAck"`` …)."""
        reply = await self.request(CreateQueue(id=self.next_id(), queue=queue, headers=options))
        return _json(reply.payload)  # type: ignore[union-attr]

    async def delete_queue(self, queue: str) -> None:
        await self.request(DeleteQueue(id=self.next_id(), queue=queue))

    async def queue_info(self, queue: str) -> dict[str, Any]:
        reply = await self.request(QueueInfo(id=self.next_id(), queue=queue))
        return _json(reply.payload)  # type: ignore[union-attr]

    async def list_queues(self) -> list[str]:
        reply = await self.request(ListQueues(id=self.next_id()))
        return _json(reply.payload)  # type: ignore[union-attr]

    async def close(self) -> None:
        """Say ``disconnect`` and close."""
        if not self._writer.is_closing():
            with contextlib.suppress(Exception):
                self.send(Disconnect(id=self.next_id()))
                await self._writer.drain()
            self._writer.close()
            with contextlib.suppress(Exception):
                await self._writer.wait_closed()
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task

    def abort(self) -> None:
        """Drop the connection without a ``disconnect`` (tests of crashes)."""
        self._writer.transport.abort()
