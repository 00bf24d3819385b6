"""VibeMQ over WebSocket at ``/ws/vibemq`` (vibemq.md §16): a thin Channels transport.

Each text frame is one JSON protocol message, decoded here and fed to the same
:class:`~brokers.servers.vibemq.Session` the TCP server uses, on this web process's engine
(:mod:`proxy.runtime`), so browsers and TCP clients share queues. A binary frame closes
with 1003, an oversized message with 1009, unparseable JSON gets ``INVALID_MESSAGE`` and
then 1007. Outgoing frames go through a bounded queue drained by one writer task: the
session sees the connection as not writable while it is full (backpressure).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence

from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings

from brokers.protocols.vibemq import (
    WEBSOCKET_SUBPROTOCOL,
    WS_CLOSE_BINARY_FRAME,
    WS_CLOSE_INVALID_PAYLOAD,
    WS_CLOSE_TOO_BIG,
    ErrorCode,
    Frame,
    InvalidUtf8,
    ProtocolError,
    UnparseableFrame,
    decode_json,
    encode_json,
    error_frame,
)
from brokers.servers.vibemq import (
    COMMANDS,
    Hub,
    ServerConfig,
    ServerContext,
    Session,
    client_address,
    config_from,
)
from proxy import ws_close_codes
from proxy.runtime import Runtime, runtime

log = logging.getLogger("mqcloud.vibemq")
OUTBOX_LIMIT = 1_000
ws_close_codes.install()

_endpoint: tuple[Runtime, ServerContext, Hub] | None = None
_endpoint_lock: asyncio.Lock | None = None


def ws_config() -> ServerConfig:
    """The web process's VibeMQ settings (``VIBEMQ_WS_ALLOWED_ORIGINS`` …)."""
    return config_from(settings)


async def endpoint() -> tuple[ServerContext, Hub]:
    """This process's VibeMQ context and hub, made on first use in the running loop."""
    global _endpoint, _endpoint_lock
    rt = await runtime()
    if _endpoint is not None and _endpoint[0] is rt:
        return _endpoint[1], _endpoint[2]
    if _endpoint_lock is None:
        _endpoint_lock = asyncio.Lock()
    async with _endpoint_lock:
        if _endpoint is None or _endpoint[0] is not rt:
            rt.engine.credentials.follow(rt.watcher)  # a rotated token closes its sockets
            ctx = ServerContext(engine=rt.engine, watcher=rt.watcher, config=ws_config())
            hub = Hub(ctx)
            await hub.start()
            _endpoint = (rt, ctx, hub)
    return _endpoint[1], _endpoint[2]


async def close_endpoint() -> None:
    """Stop this process's hub (tests running the consumer in their own event loop)."""
    global _endpoint
    if _endpoint is not None:
        await _endpoint[2].stop()
        _endpoint = None


def _origin(scope: dict) -> str:
    for name, value in scope.get("headers", ()):
        if name == b"origin":
            return value.decode("latin-1")
    return ""


class VibeMQConsumer(AsyncWebsocketConsumer):
    """One browser (or any WebSocket client) connection."""

    # Deliveries come from the engine, not from Channels groups: no channel layer (an
    # unconfigured alias gives None), so a connection costs no Redis reader of its own.
    channel_layer_alias = "vibemq-none"

    session: Session | None = None
    ctx: ServerContext | None = None
    _writer: asyncio.Task[None] | None = None
    _admitted = False

    async def connect(self) -> None:
        self.ctx, hub = await endpoint()
        allowed = self.ctx.config.allowed_origins
        if allowed and _origin(self.scope) not in allowed:
            await self.close()
            return
        client = self.scope.get("client") or ("", 0)
        verdict = self.ctx.gate.admit(str(client[0]))
        if verdict == "silent":
            await self.close()
            return
        offered = self.scope.get("subprotocols") or []
        await self.accept(WEBSOCKET_SUBPROTOCOL if WEBSOCKET_SUBPROTOCOL in offered else None)
        if verdict == "limit":
            frame = error_frame(ErrorCode.CONNECTION_LIMIT, "too many connections")
            await self.send(text_data=encode_json(frame).decode())
            await self.close()
            return
        self._admitted = True
        self._outbox: asyncio.Queue[object] = asyncio.Queue()
        self._writer = asyncio.create_task(self._write(), name="vibemq-ws-writer")
        self.session = Session(
            self.ctx,
            hub,
            WebSocketTransport(self),
            str(client[0]),
            COMMANDS,
            client_address(client),
        )
        self.session.start()

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None):
        session = self.session
        if session is None:
            return
        if text_data is None:
            self.close_with(WS_CLOSE_BINARY_FRAME)
            return
        limit = self.ctx.config.max_frame_size  # type: ignore[union-attr]
        utf8 = True
        try:
            size = len(text_data) if len(text_data) > limit else len(text_data.encode("utf-8"))
        except UnicodeEncodeError:  # lone surrogates: bytes that were not UTF-8 (see
            utf8 = False  # :mod:`proxy.ws_close_codes`), as the peer sent them
            size = len(text_data.encode("utf-8", "surrogateescape"))
        if size > limit:
            self.close_with(WS_CLOSE_TOO_BIG)
            return
        event: Frame | ProtocolError
        if not utf8:
            event = InvalidUtf8("the message is not valid UTF-8")
        else:
            try:
                event = decode_json(text_data)
            except ProtocolError as exc:
                event = exc
        await session.room()
        session.feed(event)

    async def disconnect(self, code: int) -> None:
        session, self.session = self.session, None  # no cycle with the session left
        if session is not None:
            await session.close()
        if self._admitted:
            self._admitted = False
            self.ctx.gate.release()  # type: ignore[union-attr]
        if self._writer is not None:
            self._writer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._writer

    # ---------------------------------------------------------------- output

    async def _write(self) -> None:
        while True:
            item = await self._outbox.get()
            if isinstance(item, int):  # a close code: after everything queued before it
                await self.close(code=item)
                return
            await self.send(text_data=item)  # type: ignore[arg-type]
            if self._outbox.qsize() == OUTBOX_LIMIT - 1 and self.session is not None:
                self.session.on_writable()

    def close_with(self, code: int) -> None:
        """Close after the frames already queued."""
        if self._writer is not None:
            self._outbox.put_nowait(code)


class WebSocketTransport:
    """The session's view of a consumer (see :class:`~brokers.servers.vibemq.Transport`)."""

    client_protocol = "vibemq-ws"

    def __init__(self, consumer: VibeMQConsumer) -> None:
        self._consumer = consumer

    def send(self, frame: Frame) -> None:
        self._consumer._outbox.put_nowait(encode_json(frame).decode())

    def send_json(self, body: bytes) -> None:
        self._consumer._outbox.put_nowait(body.decode())

    def send_json_many(self, bodies: Sequence[bytes]) -> None:
        put = self._consumer._outbox.put_nowait
        for body in bodies:  # a WebSocket message per frame (§1)
            put(body.decode())

    @property
    def writable(self) -> bool:
        return self._consumer._outbox.qsize() < OUTBOX_LIMIT

    def close(self, error: ProtocolError | None = None) -> None:
        code = WS_CLOSE_INVALID_PAYLOAD if isinstance(error, UnparseableFrame) else 1000
        self._consumer.close_with(code)

    def frames_done(self) -> None:
        """Nothing to resume: Channels hands over one message at a time."""
