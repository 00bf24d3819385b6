"""``consume`` (zbus.md §9): register a long poll on a queue, pub/sub or Temp MQ.

There is no direct reply; deliveries carry the consume's ``msgid``.
"""

from __future__ import annotations

from brokers.protocols.zbus import Message
from brokers.servers.zbus.connection import Connection
from brokers.servers.zbus.context import ServerContext
from brokers.servers.zbus.produce import resolve
from brokers.servers.zbus.pubsub import pubsub_for
from brokers.servers.zbus.queue import queue_for


async def consume(ctx: ServerContext, conn: Connection, msg: Message) -> None:
    """Park a pull session (queue), arm a subscription (pub/sub) or a waiter (Temp)."""
    mq, app = await resolve(ctx, conn, msg, consume=True)
    if mq.temp is not None:
        mq.temp.wait(conn, msg.msgid, msg.window, msg.aliases)
        return
    async with conn.ordered("consume", mq.name):  # a later consume replaces an earlier one
        if mq.pubsub:
            runtime = pubsub_for(ctx, mq.name)
            await runtime.consume(conn, msg.msgid, msg.window, msg.topics, msg.aliases, app)
        else:
            await queue_for(ctx, mq.name).consume(conn, msg.msgid, msg.window, msg.aliases, app)
