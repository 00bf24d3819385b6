"""Temp MQs across brokers: a registry in Redis and reply forwarding over Redis pub/sub.

A Temp MQ lives in the memory of the broker holding its owner connection (:mod:`.temp`),
but a worker may be connected to any broker of the cluster. So every zbus server instance
has a random id and listens on its own channel ``zbus:relay:<id>``, and registers each Temp
MQ it opens under ``zbus:temp:{<name>}`` → (instance id, mode, token hash), with an expiry
refreshed while the owner connection lives and removed (if still its own) when it closes.

A produce to a name that is neither a local Temp MQ nor a catalog MQ looks the registry up;
found, the message is published on the owner's channel and the owner puts it into the
Temp MQ like a local reply. ``PUBLISH`` counts receivers: 0 means the owner is gone, and a
reply for a Temp MQ that no longer exists anywhere is dropped with a log line. A Temp MQ is
registered before a request that uses it is stored, so a reply cannot overtake it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import msgspec

from brokers.engine import cancel_and_wait
from brokers.protocols.zbus import Message, RequestLine, StatusLine, reason_phrase

if TYPE_CHECKING:
    from brokers.servers.zbus.context import ServerContext


class Registered(Protocol):
    """A Temp MQ of this instance as the registry sees it (:class:`.temp.TempMq`)."""

    name: str
    entry: bytes


log = logging.getLogger("mqcloud.zbus")

REGISTRY_TTL_MS = 30_000
"""A registration outlives its broker by at most this long."""
REFRESH_INTERVAL = 10.0
"""Registrations of live Temp MQs are renewed this often."""

_ENTRY = msgspec.msgpack.Decoder(tuple[str, int, str])
_FORWARD = msgspec.msgpack.Decoder(tuple[str, int, dict[str, str], bytes])
_ENCODER = msgspec.msgpack.Encoder()

_DELETE_IF_MINE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


def temp_key(name: str) -> str:
    """Registry key of Temp MQ ``name`` (one key, its own hash tag)."""
    return f"zbus:temp:{{{name}}}"


def channel(instance: str) -> str:
    """The pub/sub channel of one zbus server instance."""
    return f"zbus:relay:{instance}"


@dataclass(frozen=True, slots=True)
class RemoteTemp:
    """A Temp MQ owned by another zbus server instance."""

    name: str
    instance: str
    mode: int
    token_hash: str
    """SHA-256 of the Temp MQ's access token, ``""`` when it has none."""


def encode_entry(instance: str, mode: int, token_hash: str) -> bytes:
    """The registry value of a Temp MQ."""
    return _ENCODER.encode((instance, mode, token_hash))


def encode_forward(name: str, message: Message) -> bytes:
    """A message for Temp MQ ``name`` as it travels to the owner."""
    return _ENCODER.encode((name, message.status or 0, dict(message.headers), message.body))


def decode_forward(data: bytes) -> tuple[str, Message]:
    """(Temp MQ name, message) of a forwarded reply; raises ``msgspec.DecodeError``."""
    name, status, headers, body = _FORWARD.decode(data)
    start = StatusLine(status, reason_phrase(status)) if status else RequestLine()
    return name, Message(start=start, headers=headers, body=body)


class Relay:
    """This server instance's side of the registry and its forwarding channel."""

    def __init__(self, ctx: ServerContext) -> None:
        self.ctx = ctx
        self.instance = uuid.uuid4().hex
        self._pubsub: Any = None
        self._listener: asyncio.Task[None] | None = None
        self._refresher: asyncio.Task[None] | None = None

    @property
    def redis(self) -> Any:
        """The engine's Redis client."""
        return self.ctx.engine.redis

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Subscribe to this instance's channel (confirmed) and start renewing registrations."""
        await self._subscribe()
        self._listener = asyncio.get_running_loop().create_task(
            self._listen(), name="zbus-relay-listener"
        )
        self._refresher = asyncio.get_running_loop().create_task(
            self._refresh_loop(), name="zbus-relay-refresh"
        )

    async def stop(self) -> None:
        """Stop listening and renewing (registrations of closed Temp MQs are already gone)."""
        await cancel_and_wait(self._refresher)
        await cancel_and_wait(self._listener)
        await self._close_pubsub()

    async def _subscribe(self) -> None:
        self._pubsub = self.redis.pubsub()
        await self._pubsub.subscribe(channel(self.instance))
        async with asyncio.timeout(5.0):
            while True:
                msg = await self._pubsub.get_message(timeout=1.0)
                if msg is not None and _text(msg.get("type")) == "subscribe":
                    return

    async def _close_pubsub(self) -> None:
        if self._pubsub is not None:
            with contextlib.suppress(Exception):
                await self._pubsub.aclose()
            self._pubsub = None

    # ------------------------------------------------------------------ registry

    async def register(self, temp: Registered) -> None:
        """Record that this instance owns ``temp``."""
        await self.redis.set(temp_key(temp.name), temp.entry, px=REGISTRY_TTL_MS)

    async def unregister(self, temp: Registered) -> None:
        """Remove ``temp``'s registration unless another instance took the name since."""
        await self.redis.eval(_DELETE_IF_MINE, 1, temp_key(temp.name), temp.entry)

    async def find(self, name: str) -> RemoteTemp | None:
        """The Temp MQ ``name`` of another instance, or None."""
        raw = await self.redis.get(temp_key(name))
        if raw is None:
            return None
        try:
            instance, mode, token_hash = _ENTRY.decode(raw)
        except msgspec.DecodeError:
            log.warning("zbus: unreadable registration of temp MQ %s", name)
            return None
        if instance == self.instance:
            return None  # ours but already closed: not found
        return RemoteTemp(name, instance, mode, token_hash)

    async def _refresh_loop(self) -> None:
        while True:
            await asyncio.sleep(REFRESH_INTERVAL)
            try:
                await self.refresh()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.warning("zbus: renewing temp MQ registrations failed", exc_info=True)

    async def refresh(self) -> None:
        """Renew (or restore) the registration of every live Temp MQ of this instance."""
        temps = list(self.ctx.temps.values())
        if not temps:
            return
        pipe = self.redis.pipeline(transaction=False)
        for temp in temps:
            pipe.set(temp_key(temp.name), temp.entry, px=REGISTRY_TTL_MS)
        await pipe.execute()

    # ------------------------------------------------------------------ forwarding

    async def forward(self, remote: RemoteTemp, message: Message) -> bool:
        """Send ``message`` to ``remote``'s owner; False (logged) if no owner listens."""
        receivers = await self.redis.publish(
            channel(remote.instance), encode_forward(remote.name, message)
        )
        if not receivers:
            log.info(
                "zbus: temp MQ %s is gone (owner %s); message %s dropped",
                remote.name,
                remote.instance,
                message.msgid,
            )
            return False
        return True

    def deliver(self, data: bytes) -> None:
        """A forwarded message arrived: into the local Temp MQ, or dropped with a log line."""
        try:
            name, message = decode_forward(data)
        except (msgspec.DecodeError, ValueError):
            log.warning("zbus: unreadable forwarded message dropped")
            return
        temp = self.ctx.temps.get(name)
        if temp is None:
            log.info("zbus: temp MQ %s is gone; forwarded message %s dropped", name, message.msgid)
            return
        temp.put(message)

    async def _listen(self) -> None:
        while True:
            try:
                msg = await self._pubsub.get_message(timeout=5.0)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.warning("zbus relay connection lost; resubscribing", exc_info=True)
                await self._resubscribe()
                continue
            if msg is not None and _text(msg.get("type")) == "message":
                self.deliver(msg["data"])

    async def _resubscribe(self) -> None:
        while True:
            await self._close_pubsub()
            await asyncio.sleep(0.5)
            try:
                await self._subscribe()
                return
            except asyncio.CancelledError:
                raise
            except Exception:
                log.warning("zbus relay: subscribing failed; retrying", exc_info=True)


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
