"""``request`` (zbus.md §10, §13.2): RPC through a service MQ and a Temp reply queue.

The requester's reply queue (``mq_reply``, default its session id) is created as a Temp
MQ of mode 5 owned by the requester, a waiter for the request's ``msgid`` is registered
*before* the request is stored (so a fast reply cannot overtake it), the reply queue is
registered for the other brokers (a worker may answer through any of them), and the request is
stored in the service MQ with ``ack: 0`` forced. Any number of requests may be in flight.
A reply queue that exists is not created again: a catalog MQ named as ``mq_reply`` gets
the reply stored like any produce (no waiter), and another connection's Temp MQ is waited
on only with a token that opens it, as a consume of it would need.

A caller makes one request after another on a reply queue that exists and is registered
already: such a request is handled as it is decoded, without a task (:func:`request_now`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from brokers.engine import EngineError
from brokers.protocols.zbus import REPLY_QUEUE_MODE, Header, Message
from brokers.protocols.zbus.replies import mq_forbidden
from brokers.servers.zbus.access import Forbidden
from brokers.servers.zbus.batch import Outcomes, line_for
from brokers.servers.zbus.connection import Connection
from brokers.servers.zbus.context import ServerContext
from brokers.servers.zbus.mqs import lookup
from brokers.servers.zbus.produce import authorize, resolve, store
from brokers.servers.zbus.replies import Refuse
from brokers.servers.zbus.stamp import stamp_updates
from brokers.servers.zbus.stored import to_engine
from brokers.servers.zbus.temp import TempMq, open_temp

_FORWARD = {Header.ACK: "0", Header.CMD: "request"}
"""What the stored request carries beside its reply queue (§10)."""


async def request(ctx: ServerContext, conn: Connection, msg: Message) -> None:
    """Register the reply waiter and queue the request."""
    mq, app = await resolve(ctx, conn, msg, consume=False)
    reply_name = msg.mq_reply or conn.session_id
    forward = msg.with_headers({**_FORWARD, Header.MQ_REPLY: reply_name})
    temp = ctx.temps.get(reply_name)
    if temp is None:
        if ctx.snapshot.zbus_topic(reply_name) is not None:
            # a catalog MQ: the reply is stored there like any produce (§10.2 creates the
            # reply queue only if it does not exist; a Temp MQ of that name would shadow
            # the MQ for everyone, its produces kept in memory only)
            await store(ctx, conn, mq, app, forward)
            return
        temp = open_temp(ctx, reply_name, int(REPLY_QUEUE_MODE), conn)
    elif not _may_wait(temp, conn, msg.token):
        raise Refuse(403, mq_forbidden(reply_name, msg.token))
    temp.wait(conn, msg.msgid, msg.window, msg.aliases)
    temp.registering += 1
    try:
        await temp.registered()  # a worker on another broker must find the reply queue
    finally:
        temp.registering -= 1
    # from here to the line nothing waits: no request_now of the queue comes in between
    await store(ctx, conn, mq, app, forward)


def _may_wait(temp: TempMq, conn: Connection, token: str | None) -> bool:
    """Whether a request of ``conn`` with ``token`` may wait for replies on ``temp``: its
    owner, or a token that opens it, as for a consume (a guarded reply queue's replies
    went to any connection that named it as ``mq_reply``)."""
    return temp.owner is conn or temp.opens_to(token)


def request_now(
    ctx: ServerContext,
    conn: Connection,
    msg: Message,
    answer_error: Callable[[Connection, Message, BaseException], None],
) -> asyncio.Future[Outcomes] | None:
    """:func:`request` of ``msg`` (decoded, not yet stamped) without a task, when it
    goes to a catalog MQ of this server whose gate lets its acting app produce, and its
    reply queue is a Temp MQ here that the other brokers can find already: stamped, its
    waiter registered, queued on the connection's line; ``answer_error`` answers a
    failure to store it. Returns the store's future, or None with nothing done (the
    first request of a reply queue, a refusal: :func:`request` takes it)."""
    mq = lookup(ctx, msg.mq or "")
    if mq is None or mq.topic is None or mq.temp is not None:
        return None
    updates = stamp_updates(ctx, conn, msg)
    reply_name = updates.get(Header.MQ_REPLY) or msg.mq_reply or conn.session_id
    temp = ctx.temps.get(reply_name)
    if temp is None or temp.registering or (temp.ready is not None and not temp.ready.done()):
        return None
    if not _may_wait(temp, conn, msg.token):
        return None  # request() refuses it
    try:
        app = authorize(ctx, conn, mq, msg.token, consume=False)
    except (Forbidden, EngineError):
        return None
    # the stamp sets none of what the waiter and an error answer read (msgid, window,
    # aliases): they come from ``msg``, the stamp only goes into the stored headers
    temp.wait(conn, msg.msgid, msg.window, msg.aliases)
    headers = dict(msg.headers)
    headers.update(updates)
    headers.update(_FORWARD)
    headers[Header.MQ_REPLY] = reply_name
    headers.pop(Header.TOKEN, None)
    done = line_for(ctx, conn, mq.code, mq.pubsub).submit_many(
        app, [to_engine(msg, headers=headers)]
    )

    def answer(done: asyncio.Future[Outcomes]) -> None:
        if done.cancelled():  # the connection went away before it was stored
            return
        (error,) = done.result()
        if error is not None:
            answer_error(conn, msg, error)

    done.add_done_callback(answer)
    return done
