"""An asyncio zbus 5.x client: one long-lived connection, replies matched by ``msgid``.

Many calls may be outstanding at once (produce, consume, request …); each waits for the
messages carrying its own ``msgid``. Messages that match no call (``track_pub`` pushes,
late deliveries) go to :attr:`ZbusClient.unmatched`.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Mapping
from typing import Any

import orjson

from brokers.protocols.zbus import Decoder, Message, RequestLine, encode_message


class ZbusError(Exception):
    """A non-200 reply; ``reply`` is the message."""

    def __init__(self, reply: Message) -> None:
        super().__init__(f"{reply.status}: {reply.body.decode(errors='replace')}")
        self.reply = reply


class ZbusClient:
    """A zbus connection to ``host:port``."""

    def __init__(self, host: str, port: int, *, timeout: float = 10.0) -> None:
        self.host, self.port, self.timeout = host, port, timeout
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._task: asyncio.Task[None] | None = None
        self._waiting: dict[str, asyncio.Queue[Message]] = {}
        self.unmatched: asyncio.Queue[Message] = asyncio.Queue()

    async def __aenter__(self) -> ZbusClient:
        await self.connect()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def connect(self) -> None:
        """Open the connection and start reading."""
        self._reader, self._writer = await asyncio.open_connection(self.host, self.port)
        self._task = asyncio.create_task(self._read(), name="zbus-client-reader")

    async def close(self) -> None:
        """Close the connection."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._writer is not None:
            self._writer.close()
            with contextlib.suppress(Exception):
                await self._writer.wait_closed()

    async def _read(self) -> None:
        assert self._reader is not None
        decoder = Decoder()
        while True:
            data = await self._reader.read(65536)
            if not data:
                break
            for event in decoder.feed(data):
                if not isinstance(event, Message):
                    continue
                queue = self._waiting.get(event.msgid or "")
                (queue or self.unmatched).put_nowait(event)
        for queue in self._waiting.values():
            queue.put_nowait(Message(body=b"connection closed"))

    # ------------------------------------------------------------------ primitives

    def send(self, headers: Mapping[str, str], body: bytes | str = b"") -> None:
        """Write one ``GET / HTTP/1.1`` message with ``headers``."""
        assert self._writer is not None, "not connected"
        data = body.encode() if isinstance(body, str) else body
        self._writer.write(encode_message(Message(RequestLine(), dict(headers), data)))

    @contextlib.contextmanager
    def _expect(self, msgid: str) -> Any:
        queue: asyncio.Queue[Message] = asyncio.Queue()
        self._waiting[msgid] = queue
        try:
            yield queue
        finally:
            self._waiting.pop(msgid, None)

    async def _get(self, queue: asyncio.Queue[Message], wait_s: float | None) -> Message:
        reply = await asyncio.wait_for(queue.get(), self.timeout if wait_s is None else wait_s)
        if reply.status is None:
            raise ConnectionError("connection closed")
        return reply

    async def invoke(
        self, headers: Mapping[str, str], body: bytes | str = b"", *, wait_s: float | None = None
    ) -> Message:
        """Send with a fresh ``msgid`` and return the message answering it."""
        msgid = str(uuid.uuid4())
        with self._expect(msgid) as queue:
            self.send({**headers, "msgid": msgid}, body)
            return await self._get(queue, wait_s)

    @staticmethod
    def _checked(reply: Message) -> Message:
        if reply.status != 200:
            raise ZbusError(reply)
        return reply

    # ------------------------------------------------------------------ commands

    async def produce(
        self,
        mq: str,
        body: bytes | str,
        *,
        topic: str | None = None,
        token: str | None = None,
        ack: bool = True,
        headers: Mapping[str, str] | None = None,
    ) -> Message | None:
        """Produce; returns the 200 reply (None with ``ack=False``), raises ZbusError."""
        fields = {"cmd": "produce", "mq": mq, **(headers or {})}
        if topic is not None:
            fields["topic"] = topic
        if token is not None:
            fields["token"] = token
        if not ack:
            self.send({**fields, "ack": "0", "msgid": str(uuid.uuid4())}, body)
            return None
        return self._checked(await self.invoke(fields, body))

    async def consume(
        self,
        mq: str,
        *,
        window: int | None = None,
        topic: str | None = None,
        token: str | None = None,
        wait_s: float | None = None,
    ) -> Message | None:
        """One long poll: the delivered message, or None on local timeout (consume again)."""
        fields = {"cmd": "consume", "mq": mq}
        if window is not None:
            fields["window"] = str(window)
        if topic is not None:
            fields["topic"] = topic
        if token is not None:
            fields["token"] = token
        try:
            reply = await self.invoke(fields, wait_s=wait_s)
        except TimeoutError:
            return None
        if reply.status in (403, 404):
            raise ZbusError(reply)
        return reply

    async def stream(
        self, mq: str, *, topic: str | None = None, token: str | None = None
    ) -> AsyncIterator[Message]:
        """Every message of ``mq`` under one ``window: -1`` consume, until cancelled."""
        msgid = str(uuid.uuid4())
        fields = {"cmd": "consume", "mq": mq, "window": "-1", "msgid": msgid}
        if topic is not None:
            fields["topic"] = topic
        if token is not None:
            fields["token"] = token
        with self._expect(msgid) as queue:
            self.send(fields)
            while True:
                reply = await queue.get()
                if reply.status is None:
                    raise ConnectionError("connection closed")
                if reply.status in (403, 404):
                    raise ZbusError(reply)
                yield reply

    async def request(
        self,
        mq: str,
        body: bytes | str,
        *,
        token: str | None = None,
        wait_s: float | None = None,
    ) -> Message:
        """RPC through service MQ ``mq``: the worker's reply (any status)."""
        fields = {"cmd": "request", "mq": mq}
        if token is not None:
            fields["token"] = token
        reply = await self.invoke(fields, body, wait_s=wait_s)
        if reply.status in (403, 404) and reply.headers.get("msgid_raw") is None:
            raise ZbusError(reply)
        return reply

    def reply(self, request: Message, body: bytes | str, *, status: int = 200) -> None:
        """Answer a request received by a worker's consume (ack off, as workers do)."""
        self.send(
            {
                "cmd": "produce",
                "mq": request.mq_reply or "",
                "msgid": request.msgid_raw or "",
                "ack": "0",
                "reply_code": str(status),
            },
            body,
        )

    def heartbeat(self) -> None:
        """Send a heartbeat (never answered)."""
        self.send({"cmd": "heartbeat"})

    async def create_mq(
        self, name: str, mode: int = 1, *, access_token: str = "", token: str | None = None
    ) -> Message:
        """``create_mq``; raises ZbusError on 400/403."""
        fields = {"cmd": "admin", "sub_cmd": "create_mq"}
        if token is not None:
            fields["token"] = token
        body = orjson.dumps({"mqName": name, "accessToken": access_token, "mqMode": mode})
        return self._checked(await self.invoke(fields, body))

    async def data(self, *, token: str | None = None) -> dict[str, Any]:
        """The broker's ``data`` JSON."""
        fields = {"cmd": "admin", "sub_cmd": "data"}
        if token is not None:
            fields["token"] = token
        return orjson.loads(self._checked(await self.invoke(fields)).body)

    async def track_sub(self) -> dict[str, Any]:
        """Subscribe to the track table; the first table (pushes arrive in ``unmatched``)."""
        return orjson.loads(self._checked(await self.invoke({"cmd": "track_sub"})).body)
