"""``produce`` (zbus.md §8): store into a queue, pub/sub or Temp MQ, then ack with the time.

Produces from one connection to one MQ are stored in the order they arrived, those queued
up together with one engine call (:mod:`.batch`), while produces to other MQs and other
commands run beside them. A produce to another broker's Temp MQ is forwarded (:mod:`.relay`).

The common produce — to a catalog MQ, by an app its policy lets produce — runs without a
task of its own (:func:`produce_now`, thousands arrive per second on one connection): the
produces to one MQ decoded together are checked once, stamped and queued on the line as
one submission, and answered from its outcomes. So does a produce to a Temp MQ of this
server (an RPC worker's reply): put into it at once. Everything else, refusals included,
takes :func:`produce`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from brokers.engine import AccessDenied, EngineError, TopicNotFound
from brokers.protocols.zbus import Header, Message
from brokers.protocols.zbus.replies import mq_forbidden, mq_not_found
from brokers.servers.zbus.access import Forbidden, acting_app
from brokers.servers.zbus.batch import Outcomes, line_for
from brokers.servers.zbus.connection import Connection
from brokers.servers.zbus.context import ServerContext
from brokers.servers.zbus.mqs import MqRef, lookup, lookup_anywhere
from brokers.servers.zbus.replies import Refuse, reply
from brokers.servers.zbus.stamp import stamp_updates
from brokers.servers.zbus.stored import to_engine
from brokers.servers.zbus.temp import TempMq


async def resolve(
    ctx: ServerContext, conn: Connection, msg: Message, *, consume: bool
) -> tuple[MqRef, str]:
    """The target MQ and the app acting; 404 or 403 otherwise (the engine's gate decides
    whether the app may produce to or consume a catalog MQ). Produces may target a Temp
    MQ of another broker; consumes only this broker's."""
    name = msg.mq or ""
    # a produce that wants no answer may take a Temp MQ of another broker found lately
    mq = lookup(ctx, name) if consume else await lookup_anywhere(ctx, name, fresh=msg.ack)
    if mq is None:
        raise Refuse(404, mq_not_found(name))
    try:
        return mq, authorize(ctx, conn, mq, msg.token, consume=consume)
    except (Forbidden, AccessDenied):
        raise Refuse(403, mq_forbidden(name, msg.token)) from None
    except TopicNotFound:
        raise Refuse(404, mq_not_found(name)) from None


def authorize(
    ctx: ServerContext, conn: Connection, mq: MqRef, token: str | None, *, consume: bool
) -> str:
    """The app a request with ``token`` acts as on ``mq``, once the engine's gate let it
    produce to (or consume) a catalog MQ; raises :class:`Forbidden` (the token opens
    nothing) or the gate's :class:`~brokers.engine.EngineError`."""
    if consume:
        return consumer_gate(ctx, conn, mq, token)[0]
    app = acting_app(ctx.snapshot, mq, token)
    if mq.topic is not None:
        note_client(ctx, conn, app)
        ctx.engine.authorize_producer(mq.code, app, conn.remote_addr)
    return app


def consumer_gate(
    ctx: ServerContext, conn: Connection, mq: MqRef, token: str | None
) -> tuple[str, bool]:
    """The app a consume with ``token`` acts as on ``mq`` and whether the engine's gate lets
    it take messages now (False while its consumer is paused; True on a Temp MQ); raises
    as :func:`authorize` does."""
    app = acting_app(ctx.snapshot, mq, token)
    if mq.topic is None:
        return app, True
    note_client(ctx, conn, app)
    allowed = ctx.engine.authorize_consumer(mq.code, app, conn.remote_addr)
    if token and token not in conn.held_tokens:
        hold_token(ctx, conn, token)
    return app, allowed


def hold_token(ctx: ServerContext, conn: Connection, token: str) -> None:
    """Hold an app ``token`` a consume acts on for as long as ``conn`` lasts: a session it
    opened (a parked or streaming consume) must not outlive the token, so rotating it
    ends the connection; the client's next consume with it gets 403. An MQ's own
    access token is no app's: nothing to hold."""
    credential = ctx.engine.credentials.hold(token, conn.end)
    if credential is not None:
        conn.held_tokens.add(token)
        conn.on_close(credential.release)


def note_client(ctx: ServerContext, conn: Connection, app: str) -> None:
    """List the connection as a zbus client of ``app`` (the app its requests act as: a
    zbus client states neither language nor version) until it closes."""
    if conn.client_app == app or not app:
        return
    first, conn.client_app = not conn.client_app, app
    ctx.engine.client_connected(conn.remote_addr, app, "zbus")
    if first:  # after: a connection closed already withdraws it at once
        address = conn.remote_addr
        conn.on_close(lambda: ctx.engine.client_disconnected(address))


async def store(ctx: ServerContext, conn: Connection, mq: MqRef, app: str, msg: Message) -> None:
    """Store ``msg`` (token removed) in ``mq``, after this connection's earlier produces."""
    msg = msg.with_headers({Header.TOKEN: None})
    if mq.temp is not None:
        mq.temp.put(msg)
        return
    if mq.remote is not None:
        assert ctx.relay is not None
        async with conn.ordered("produce", mq.code):
            if not await ctx.relay.forward(mq.remote, msg):
                raise Refuse(404, mq_not_found(mq.name))
        return
    await line_for(ctx, conn, mq.code, mq.pubsub).submit(app, to_engine(msg))


async def produce(ctx: ServerContext, conn: Connection, msg: Message) -> None:
    """Store, then reply 200 with the broker time unless ``ack`` is off."""
    mq, app = await resolve(ctx, conn, msg, consume=False)
    await store(ctx, conn, mq, app, msg)
    if msg.ack:
        reply(conn, msg, 200, str(ctx.engine.now_ms()))


def produce_now(
    ctx: ServerContext,
    conn: Connection,
    run: list[Message],
    answer_error: Callable[[Connection, Message, BaseException], None],
) -> asyncio.Future[Outcomes] | None:
    """:func:`produce` of ``run`` — produces decoded together, not yet stamped, all to
    one MQ with one token (at most :data:`~.batch.MAX_BATCH`) — without a task, when
    they go to a catalog MQ whose gate lets their acting app produce: stamped, queued on
    the line as one submission, each answered when it is stored (``answer_error``
    answers a failure), or into a Temp MQ of this server whose token lets them in (put
    and answered at once). Returns the run's future, or None when the run must take
    :func:`produce` message by message (another broker's Temp MQ, an unknown MQ, any
    refusal: that path answers it)."""
    first = run[0]
    mq = lookup(ctx, first.headers.get(Header.MQ))  # the key start_all grouped the run by
    if mq is None:  # found here, it is a catalog MQ or a Temp MQ of this server
        return None
    try:
        app = authorize(ctx, conn, mq, first.token, consume=False)
    except (Forbidden, EngineError):
        return None
    if mq.temp is not None:
        return _put_now(ctx, conn, mq.temp, run)
    messages = []
    for msg in run:
        headers = dict(msg.headers)
        headers.update(stamp_updates(ctx, conn, msg))
        headers.pop(Header.TOKEN, None)
        messages.append(to_engine(msg, headers=headers))
    done = line_for(ctx, conn, mq.code, mq.pubsub).submit_many(app, messages)

    def answer(done: asyncio.Future[Outcomes]) -> None:
        if done.cancelled():  # the connection went away before they were stored
            return
        now = str(ctx.engine.now_ms())
        for msg, error in zip(run, done.result(), strict=True):
            if error is not None:
                answer_error(conn, msg, error)
            elif msg.ack:
                reply(conn, msg, 200, now)

    done.add_done_callback(answer)
    return done


def _put_now(
    ctx: ServerContext, conn: Connection, temp: TempMq, run: list[Message]
) -> asyncio.Future[Outcomes]:
    """:func:`produce` of ``run`` into ``temp``, a Temp MQ of this server whose token lets
    them in, done at once: stamped, put, acked."""
    now = ""
    for msg in run:
        updates: dict[str, str | None] = {**stamp_updates(ctx, conn, msg), Header.TOKEN: None}
        temp.put(msg.with_headers(updates))
        if msg.ack:
            now = now or str(ctx.engine.now_ms())
            reply(conn, msg, 200, now)
    done: asyncio.Future[Outcomes] = asyncio.get_running_loop().create_future()
    done.set_result([None] * len(run))
    return done
