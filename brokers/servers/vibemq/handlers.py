"""The commands of vibemq.md §5–§7: connect, ping, disconnect, publish, subscribe,
unsubscribe (ack is settled inline by the session); queue management is in
:mod:`.queue_admin`. Each handler takes the session and a validated frame."""

from __future__ import annotations

import logging
import re

from brokers.engine import AccessDenied, EngineError, TopicNotFound
from brokers.protocols.vibemq import (
    Ack,
    Connect,
    CreateQueue,
    DeleteQueue,
    Disconnect,
    ErrorCode,
    Frame,
    ListQueues,
    Ping,
    Publish,
    QueueInfo,
    Subscribe,
    Unsubscribe,
    connect_ack,
    pong,
    subscribe_ack,
    unsubscribe_ack,
)
from brokers.servers.vibemq import publishing, queue_admin
from brokers.servers.vibemq.session import Session

log = logging.getLogger("mqcloud.vibemq")
CLIENT_ID_HEADER = "clientId"
"""Broker extension: names a durable FanOutWithAck subscriber (``<app>#<clientId>``)."""
CLIENT_ID = re.compile(r"[A-Za-z0-9._-]{1,128}")


async def handle(session: Session, frame: Frame) -> None:
    """Session check (§4 step 3), then dispatch."""
    if isinstance(frame, Connect):
        return _connect(session, frame)
    if isinstance(frame, Ping):
        return session.send(pong(frame))
    if not session.authenticated:
        return session.error(ErrorCode.NOT_AUTHENTICATED, "connect first", frame.id)
    if isinstance(frame, Disconnect):
        session.transport.close()
        return await session.close()
    if isinstance(frame, Publish):
        return await publishing.publish(session, [frame], admitted=True)
    if isinstance(frame, Subscribe):
        return await _subscribe(session, frame)
    if isinstance(frame, Unsubscribe):
        await session.unsubscribe(frame.queue)
        return session.send(unsubscribe_ack(frame))
    if isinstance(frame, Ack):
        return session.settle_acks([frame], admit=False)  # admitted by the session
    if isinstance(frame, CreateQueue):
        return await queue_admin.create(session, frame)
    if isinstance(frame, DeleteQueue):
        return await queue_admin.delete(session, frame)
    if isinstance(frame, QueueInfo):
        return await queue_admin.info(session, frame)
    if isinstance(frame, ListQueues):
        return queue_admin.list_queues(session, frame)
    session.error(ErrorCode.UNKNOWN_COMMAND, f"{frame.TYPE.value} not accepted", frame.id)


def _connect(session: Session, frame: Connect) -> None:
    client_id = frame.headers.get(CLIENT_ID_HEADER)
    if client_id is not None and not CLIENT_ID.fullmatch(client_id):
        return session.error(
            ErrorCode.INVALID_MESSAGE,
            f"headers.{CLIENT_ID_HEADER} must be 1-128 characters of [A-Za-z0-9._-]",
            frame.id,
        )
    token = frame.auth_token
    if token:
        credential = session.ctx.engine.credentials.hold(token, session.revoked)
        if credential is None:
            return session.error(ErrorCode.AUTH_FAILED, "unknown app token", frame.id)
        session.hold(credential)
        session.app = credential.info
    elif session.ctx.config.auth_required:
        return session.error(ErrorCode.AUTH_REQUIRED, "headers.authToken required", frame.id)
    session.authenticated = True
    if not session.subscriptions:  # a subscribed member's identity never changes
        session.client_id = client_id
    session.client_version = frame.client_version or ""
    if session.app is not None:  # an anonymous client is listed as it acts (acting_app)
        session.list_as(session.app.code)
    session.send(
        connect_ack(
            frame,
            server_version=session.ctx.config.server_version,
            connection_id=session.key,
        )
    )


async def _subscribe(session: Session, frame: Subscribe) -> None:
    if not await queue_admin.ensure(session, frame.queue, frame.id):
        return
    try:
        session.ctx.engine.authorize_consumer(
            frame.queue, session.acting_app(frame.queue), session.peer
        )
    except AccessDenied as exc:
        return session.error(ErrorCode.FORBIDDEN, str(exc), frame.id)
    except TopicNotFound as exc:
        return session.error(ErrorCode.QUEUE_NOT_FOUND, str(exc), frame.id)
    except EngineError as exc:
        return session.error(ErrorCode.INVALID_QUEUE, str(exc), frame.id)
    # recorded before the join's round trip: a connection that closes meanwhile (the join
    # done in Redis, its reply not read) leaves the group at close all the same
    session.joined.add(frame.queue)
    await session.hub.join(frame.queue, session)
    session.send(subscribe_ack(frame))  # before any delivery of the backlog
    session.subscriptions.add(frame.queue)
    await session.hub.subscribe(frame.queue, session)
