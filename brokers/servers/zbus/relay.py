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

A produce that wants no answer (``ack`` off: every RPC worker's reply) takes a Temp MQ
found in the last :data:`FOUND_FOR_S` as found, without asking the registry again: one
registry read per reply queue and second instead of one per reply, on the path every
cross-broker RPC takes. A produce with ``ack`` on always asks, so its answer (200 or 404)
is the registry's. What such a remembered finding can miss is handled where it shows:
an owner nobody hears any more is forgotten and the registry asked again, and an owner
that no longer holds the Temp MQ passes the message on once to the instance the registry
names now, when that Temp MQ has the token the sender checked (a client that reconnected
elsewhere and made its reply queue again); otherwise the message is dropped with a log
line, as a reply to a vanished Temp MQ always is.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import msgspec

from brokers.engine import EngineError, cancel_and_wait
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

FOUND_FOR_S = 1.0
"""How long a Temp MQ found in the registry counts as found for produces with ``ack`` off."""
FOUND_MAX = 10_000
"""Most Temp MQs remembered as found (the oldest forgotten first)."""


class Forward(msgspec.Struct, array_like=True, frozen=True):
    """A message for a Temp MQ as it travels to the owner: ``token_hash`` is the token
    hash the sender checked the producer's token against, ``hops`` how often it was passed
    on by an instance that no longer held the Temp MQ. (A sender of the first version
    wrote only the first four fields.)"""

    name: str
    status: int
    headers: dict[str, str]
    body: bytes
    token_hash: str = ""
    hops: int = 0


_ENTRY = msgspec.msgpack.Decoder(tuple[str, int, str])
_FORWARD = msgspec.msgpack.Decoder(Forward)
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


def encode_forward(remote: RemoteTemp, message: Message, *, hops: int = 0) -> bytes:
    """A message for Temp MQ ``remote`` as it travels to the owner."""
    forward = Forward(
        remote.name,
        message.status or 0,
        dict(message.headers),
        message.body,
        remote.token_hash,
        hops,
    )
    return _ENCODER.encode(forward)


def decode_forward(data: bytes) -> tuple[Forward, Message]:
    """A forwarded message and the message it carries; raises ``msgspec.DecodeError``."""
    forward = _FORWARD.decode(data)
    status = forward.status
    start = StatusLine(status, reason_phrase(status)) if status else RequestLine()
    return forward, Message(start=start, headers=forward.headers, body=forward.body)


class Relay:
    """This server instance's Temp MQ mailboxes: their registrations and its inbox."""

    def __init__(self, ctx: ServerContext) -> None:
        self.ctx = ctx
        self.mailboxes = ctx.engine.mailboxes(TEMP_MQS, REGISTRY_TTL_MS)
        self._refresher: asyncio.Task[None] | None = None
        self._found: dict[str, tuple[float, RemoteTemp]] = {}
        """Temp MQs of other instances lately found: name → (until, Temp MQ)."""

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

    async def find(self, name: str, *, fresh: bool = True) -> RemoteTemp | None:
        """The Temp MQ ``name`` of another instance, or None; ``fresh`` False takes one
        found within :data:`FOUND_FOR_S` without asking the registry."""
        if not fresh:
            found = self._found.get(name)
            if found is not None and found[0] > time.monotonic():
                return found[1]
        remote = await self._registered(name)
        self._found.pop(name, None)  # forgotten, or re-inserted last: the oldest go first
        if remote is None:
            return None
        while len(self._found) >= FOUND_MAX:
            del self._found[next(iter(self._found))]
        self._found[name] = (time.monotonic() + FOUND_FOR_S, remote)
        return remote

    async def _registered(self, name: str) -> RemoteTemp | None:
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
        """Send ``message`` to ``remote``'s owner; when no owner listens there, to the
        owner the registry names now if its Temp MQ has the same token; False (logged)
        when neither listens."""
        if await self.mailboxes.send(remote.instance, encode_forward(remote, message)):
            return True
        now = await self.find(remote.name)  # fresh: replaces what was remembered
        if (
            now is not None
            and now.instance != remote.instance
            and now.token_hash == remote.token_hash
            and await self.mailboxes.send(now.instance, encode_forward(now, message))
        ):
            return True
        log.info(
            "zbus: temp MQ %s is gone (owner %s); message %s dropped",
            remote.name,
            remote.instance,
            message.msgid,
        )
        return False

    def deliver(self, data: bytes) -> None:
        """A forwarded message arrived: into the local Temp MQ; passed on once to the
        instance that holds it now (:meth:`_pass_on`); or dropped with a log line."""
        try:
            forward, message = decode_forward(data)
        except (msgspec.DecodeError, ValueError):
            log.warning("zbus: unreadable forwarded message dropped")
            return
        temp = self.ctx.temps.get(forward.name)
        if temp is not None:
            temp.put(message)
        elif forward.hops == 0:
            self.ctx.spawn(self._pass_on(forward, message), f"zbus-relay-pass-{forward.name}")
        else:
            _dropped(forward.name, message)

    async def _pass_on(self, forward: Forward, message: Message) -> None:
        """Send on a message for a Temp MQ this instance no longer holds (its sender
        remembered an earlier finding) to the instance the registry names now, if that
        Temp MQ has the token the sender checked; else drop it with a log line."""
        try:
            now = await self._registered(forward.name)
            if (
                now is not None
                and now.token_hash == forward.token_hash
                and await self.mailboxes.send(now.instance, encode_forward(now, message, hops=1))
            ):
                return
        except EngineError:
            log.warning("zbus: passing on a message for temp MQ %s failed", forward.name)
        _dropped(forward.name, message)


def _dropped(name: str, message: Message) -> None:
    log.info("zbus: temp MQ %s is gone; forwarded message %s dropped", name, message.msgid)
