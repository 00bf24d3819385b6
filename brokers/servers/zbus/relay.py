"""Temp MQs across brokers: each is a named mailbox of the engine
(:class:`brokers.engine.Mailboxes`).

A Temp MQ lives in the memory of the broker holding its owner connection (:mod:`.temp`),
but a worker may be connected to any broker of the cluster. So every zbus server instance
has a random id (its mailboxes' owner) and listens on its own inbox, and registers each Temp
MQ it opens as a mailbox of the space :data:`TEMP_MQS` → (instance id, mode, token hash),
with an expiry refreshed while the owner connection lives and removed (if still its own)
when it closes.

A produce to a name that is neither a local Temp MQ nor a catalog MQ looks the registry up;
found, the message is sent to the owner's inbox and the owner puts it into the Temp MQ like
a local reply. A send that no process heard means the owner is gone, and a reply for a
Temp MQ that no longer exists anywhere is dropped with a log line. A Temp MQ is
registered before a request that uses it is stored, so a reply cannot overtake it.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

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

TEMP_MQS = "zbus-temp"
"""The mailbox space of Temp MQs."""


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
    """This server instance's Temp MQ mailboxes: their registrations and its inbox."""

    def __init__(self, ctx: ServerContext) -> None:
        self.ctx = ctx
        self.mailboxes = ctx.engine.mailboxes(TEMP_MQS, REGISTRY_TTL_MS)
        self._refresher: asyncio.Task[None] | None = None

    @property
    def instance(self) -> str:
        """This server instance's random id (the owner of its mailboxes)."""
        return self.mailboxes.owner

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Subscribe to this instance's inbox (confirmed) and start renewing registrations."""
        await self.mailboxes.start(self.deliver)
        self._refresher = asyncio.get_running_loop().create_task(
            self._refresh_loop(), name="zbus-relay-refresh"
        )

    async def stop(self) -> None:
        """Stop listening and renewing (registrations of closed Temp MQs are already gone)."""
        await cancel_and_wait(self._refresher)
        await self.mailboxes.stop()

    # ------------------------------------------------------------------ registry

    async def register(self, temp: Registered) -> None:
        """Record that this instance owns ``temp``."""
        await self.mailboxes.claim(temp.name, temp.entry)

    async def unregister(self, temp: Registered) -> None:
        """Remove ``temp``'s registration unless another instance took the name since."""
        await self.mailboxes.release(temp.name, temp.entry)

    async def find(self, name: str) -> RemoteTemp | None:
        """The Temp MQ ``name`` of another instance, or None."""
        raw = await self.mailboxes.lookup(name)
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
        await self.mailboxes.renew((temp.name, temp.entry) for temp in self.ctx.temps.values())

    # ------------------------------------------------------------------ forwarding

    async def forward(self, remote: RemoteTemp, message: Message) -> bool:
        """Send ``message`` to ``remote``'s owner; False (logged) if no owner listens."""
        if not await self.mailboxes.send(remote.instance, encode_forward(remote.name, message)):
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
