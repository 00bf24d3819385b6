"""Resolving an MQ name: this server's Temp MQs first, then the catalog's topics (§7, §13.3a),
then (for produce) the Temp MQs other brokers registered in Redis.

Every catalog topic is a zbus MQ; its ``zbus_mode`` says queue or pub/sub (the PubSub bit
decides, §7) and its ``zbus_token_hash`` is the hashed MQ access token (empty: open).
Queue and pub/sub MQs use partition 0 of their topic. A client calls a topic by its code
or, where the MQ's name cannot be a code (``order:created``, ``订单``), by its
``zbus_name``: :class:`MqRef` keeps the name the client said (for replies and listings)
and the code (for the engine and this server's runtimes).
"""

from __future__ import annotations

from dataclasses import dataclass

from brokers.engine import TopicInfo
from brokers.protocols.zbus import MqMode
from brokers.servers.zbus.context import ServerContext
from brokers.servers.zbus.relay import RemoteTemp
from brokers.servers.zbus.temp import TempMq

_PUBSUB = int(MqMode.PUBSUB)
"""The bit as a plain int: ``int & IntFlag`` goes through the enum (2 us, against 0.1;
every produce and consume asks)."""


@dataclass(frozen=True, slots=True)
class MqRef:
    """An MQ as a handler needs it."""

    name: str
    """As the client said it (replies, listings)."""
    mode: int
    topic: TopicInfo | None = None
    temp: TempMq | None = None
    remote: RemoteTemp | None = None
    """A Temp MQ of another broker (produce forwards to it, see :mod:`.relay`)."""

    @property
    def code(self) -> str:
        """The topic's code: what the engine, the queue and pub/sub runtimes and the
        activity record know it by (a Temp MQ's is its name)."""
        return self.topic.code if self.topic is not None else self.name

    @property
    def pubsub(self) -> bool:
        """PubSub bit set (otherwise a queue)."""
        return bool(self.mode & _PUBSUB)


def lookup(ctx: ServerContext, name: str | None) -> MqRef | None:
    """The MQ called ``name``, or None."""
    if not name:
        return None
    temp = ctx.temps.get(name)
    if temp is not None:
        return MqRef(name, temp.mode, temp=temp)
    topic = ctx.snapshot.zbus_topic(name)
    if topic is None:
        return None
    return MqRef(name, topic.zbus_mode, topic=topic)


async def lookup_anywhere(
    ctx: ServerContext, name: str | None, *, fresh: bool = True
) -> MqRef | None:
    """:func:`lookup`, falling back to a Temp MQ owned by another broker (``fresh``
    False: one found lately counts, see :mod:`.relay`)."""
    mq = lookup(ctx, name)
    if mq is not None or not name or ctx.relay is None:
        return mq
    remote = await ctx.relay.find(name, fresh=fresh)
    if remote is None:
        return None
    return MqRef(name, remote.mode, remote=remote)
