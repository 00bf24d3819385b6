"""``request`` (zbus.md §10, §13.2): RPC through a service MQ and a Temp reply queue.

The requester's reply queue (``mq_reply``, default its session id) is created as a Temp
MQ of mode 5 owned by the requester, a waiter for the request's ``msgid`` is registered
*before* the request is stored (so a fast reply cannot overtake it), the reply queue is
registered for the other brokers (a worker may answer through any of them), and the request is
stored in the service MQ with ``ack: 0`` forced. Any number of requests may be in flight.
"""

from __future__ import annotations

from brokers.protocols.zbus import REPLY_QUEUE_MODE, Header, Message
from brokers.servers.zbus.connection import Connection
from brokers.servers.zbus.context import ServerContext
from brokers.servers.zbus.produce import resolve, store
from brokers.servers.zbus.temp import open_temp


async def request(ctx: ServerContext, conn: Connection, msg: Message) -> None:
    """Register the reply waiter and queue the request."""
    mq, app = await resolve(ctx, conn, msg, consume=False)
    reply_name = msg.mq_reply or conn.session_id
    temp = ctx.temps.get(reply_name)
    if temp is None:
        temp = open_temp(ctx, reply_name, int(REPLY_QUEUE_MODE), conn)
    temp.wait(conn, msg.msgid, msg.window, msg.aliases)
    await temp.registered()  # a worker on another broker must find the reply queue
    forward = msg.with_headers(
        {Header.ACK: "0", Header.MQ_REPLY: reply_name, Header.CMD: "request"}
    )
    await store(ctx, conn, mq, app, forward)
