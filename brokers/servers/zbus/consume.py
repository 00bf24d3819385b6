"""``consume`` (zbus.md §9): register a long poll on a queue, pub/sub or Temp MQ.

There is no direct reply; deliveries carry the consume's ``msgid``. The common consume —
of a catalog queue MQ, by an app its policy lets consume — is handled as it is decoded,
without a task (:func:`consume_now`): a long-polling client sends one per message.
"""

from __future__ import annotations

from brokers.engine import EngineError
from brokers.protocols.zbus import Message
from brokers.servers.zbus.access import Forbidden
from brokers.servers.zbus.connection import Connection
from brokers.servers.zbus.context import ServerContext
from brokers.servers.zbus.mqs import lookup
from brokers.servers.zbus.produce import authorize, resolve
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


def consume_now(ctx: ServerContext, conn: Connection, msg: Message) -> bool:
    """:func:`consume` of ``msg`` done at once when it consumes a catalog queue MQ as an
    app the engine's gate lets consume, and nothing must be released first; False, with
    nothing done, otherwise (refusals included: :func:`consume` answers them)."""
    mq = lookup(ctx, msg.mq)
    if mq is None or mq.topic is None or mq.pubsub:
        return False
    try:
        app = authorize(ctx, conn, mq, msg.token, consume=True)
    except (Forbidden, EngineError):
        return False
    return queue_for(ctx, mq.name).consume_now(conn, msg.msgid, msg.window, msg.aliases, app)
