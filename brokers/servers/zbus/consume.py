"""``consume`` (zbus.md §9): register a long poll on a queue, pub/sub or Temp MQ.

There is no direct reply; deliveries carry the consume's ``msgid``. The common consume —
of a catalog queue MQ, by an app its policy lets consume — is handled as it is decoded,
without a task (:func:`consume_now`): a long-polling client sends one per message.
"""

from __future__ import annotations

import weakref

from brokers.engine import EngineError
from brokers.protocols.zbus import Message
from brokers.servers.zbus.access import Forbidden
from brokers.servers.zbus.connection import Connection
from brokers.servers.zbus.context import ServerContext
from brokers.servers.zbus.mqs import lookup
from brokers.servers.zbus.produce import consumer_gate, resolve
from brokers.servers.zbus.pubsub import pubsub_for
from brokers.servers.zbus.queue import queue_for


async def consume(ctx: ServerContext, conn: Connection, msg: Message) -> None:
    """Park a pull session (queue), arm a subscription (pub/sub) or a waiter (Temp)."""
    mq, app = await resolve(ctx, conn, msg, consume=True)
    if mq.temp is not None:
        if mq.temp.pubsub:
            mq.temp.subscribe(conn, msg.msgid, msg.window, msg.topics, msg.aliases)
        elif mq.temp.fifo:
            mq.temp.consume(conn, msg.msgid, msg.window, msg.aliases)
        else:
            mq.temp.wait(conn, msg.msgid, msg.window, msg.aliases)
        return
    async with conn.ordered("consume", mq.code):  # a later consume replaces an earlier one
        if mq.pubsub:
            runtime = pubsub_for(ctx, mq.code)
            await runtime.consume(conn, msg.msgid, msg.window, msg.topics, msg.aliases, app)
        else:
            await queue_for(ctx, mq.code).consume(conn, msg.msgid, msg.window, msg.aliases, app)


def consume_now(ctx: ServerContext, conn: Connection, msg: Message) -> bool:
    """:func:`consume` of ``msg`` done at once when it consumes a catalog queue MQ as an
    app the engine's gate lets consume, and nothing must be released first; False, with
    nothing done, otherwise (refusals included: :func:`consume` answers them).

    A long poller sends the same consume again and again: what its MQ, token and the
    catalog decided (the queue, the acting app, whether the gate lets it take messages
    now) is kept on the connection for as long as the catalog snapshot and the request
    are the same (:attr:`Connection.consuming`); the snapshot by a weak reference (an
    idle connection must not keep an old catalog alive)."""
    name, token, snapshot = msg.mq, msg.token, ctx.snapshot
    known = conn.consuming
    if (
        known is not None
        and known[0]() is snapshot
        and known[1] == name
        and known[2] == token
        and name not in ctx.temps  # a Temp MQ of that name opened since: it comes first
        and not known[3].retired
    ):
        queue, app, allowed = known[3], known[4], known[5]
    else:
        mq = lookup(ctx, name)
        if mq is None or mq.topic is None or mq.pubsub:
            return False
        try:
            app, allowed = consumer_gate(ctx, conn, mq, token)
        except (Forbidden, EngineError):
            return False
        queue = queue_for(ctx, mq.code)
        conn.consuming = (weakref.ref(snapshot), name, token, queue, app, allowed)
    return queue.consume_now(conn, msg.msgid, msg.window, msg.aliases, app, allowed=allowed)
