"""Connection-level commands (spec §5.1, §5.2, §6.1): ADD/REMOVE_CONNECTION, HEARTBEAT,
FETCH_HEALTH and the ADD/REMOVE_CONSUMER/PRODUCER registrations."""

from __future__ import annotations

import logging

from brokers.engine import AccessDenied, EngineError, InvalidMessage, TopicInfo, TopicNotFound
from brokers.protocols.jmq4 import (
    AddConnectionRequest,
    AddConnectionResponse,
    AddConsumerRequest,
    AddConsumerResponse,
    AddProducerRequest,
    AddProducerResponse,
    Code,
    CommandType,
    FetchHealthResponse,
    Frame,
    Header,
    RegisteredTopic,
    RemoveConsumerRequest,
    RemoveProducerRequest,
    boolean_ack,
    response_frame,
    validate_name,
)
from brokers.servers.jmq4.consume import consumer_client_id
from brokers.servers.jmq4.context import ServerContext
from brokers.servers.jmq4.errors import Reject, engine_code
from brokers.servers.jmq4.partitions import local_partitions
from brokers.servers.jmq4.session import Session

log = logging.getLogger("mqcloud.jmq4")


async def add_connection(
    ctx: ServerContext, session: Session, header: Header, req: AddConnectionRequest
) -> Frame:
    """Check app + token against the catalog (status 2 on failure) — on every call: a
    repeat returns the connection's id only with its own app and a valid token (it
    answered success whatever it carried)."""
    refused = f"app {req.app} authentication failed"
    if validate_name(req.app) is not None:
        raise Reject(Code.CN_AUTHENTICATION_ERROR, refused)
    if session.established:
        if ctx.engine.app_for_token(req.token) != req.app:
            raise Reject(Code.CN_AUTHENTICATION_ERROR, refused)
        if req.app != session.app:
            raise Reject(
                Code.CN_AUTHENTICATION_ERROR,
                f"app {req.app}: this connection is established for app {session.app}",
            )
        return response_frame(header, AddConnectionResponse(connection_id=session.connection_id))
    credential = ctx.engine.credentials.hold(req.token, session.close, app=req.app)
    if credential is None:
        raise Reject(Code.CN_AUTHENTICATION_ERROR, refused)
    connection_id = session.establish(req.app, req.region, ctx.broker_id)
    session.credential = credential
    ctx.engine.client_connected(session.address, req.app, "jmq4", req.language.name, req.version)
    return response_frame(header, AddConnectionResponse(connection_id=connection_id))


async def remove_connection(
    ctx: ServerContext, session: Session, header: Header, req: object
) -> Frame:
    """Forget the session and release the partitions it still holds."""
    if not session.established:
        raise Reject(Code.FW_CONNECTION_NOT_EXISTS, "connection not exists")
    await release_locks(ctx, session)
    ctx.engine.client_disconnected(session.address)
    session.reset()
    return boolean_ack(header)


async def release_locks(ctx: ServerContext, session: Session) -> None:
    """Release every partition lock the session fetched and did not ack, and whatever lock
    a fetch it cut short may have taken (by owner, on the partitions this broker leads).
    Each release wakes the long polls parked on its partition. Retries it fetched and
    did not ack are due again at once."""
    await _release_retries(ctx, session)
    held, session.locks = session.locks, {}
    cut_short, session.cut_short = session.cut_short, set()
    topics = ctx.snapshot.topics
    for (topic, app, partition), token in held.items():
        info = topics.get(topic)
        if info is not None:
            await _release(ctx, session, info, app, partition, token=token)
    for topic, app, owner in cut_short:
        info = topics.get(topic)
        if info is None or not owner:  # no owner would release anybody's lock
            continue
        for partition in local_partitions(info, ctx.broker_id):
            await _release(ctx, session, info, app, partition, owner=owner)


async def _release_retries(ctx: ServerContext, session: Session) -> None:
    fetched, session.retries = session.retries, {}
    for (topic, app), ids in fetched.items():
        info = ctx.snapshot.topics.get(topic)
        if info is None or not ids:
            continue
        cid = consumer_client_id(ctx, info, app, session)
        try:
            await ctx.engine.unlock_retries(topic, app, sorted(ids), client_id=cid)
        except Exception:  # best effort: their leases end anyway
            log.warning("JMQ4 could not release the retries of %s for %s", topic, app)


async def _release(
    ctx: ServerContext,
    session: Session,
    info: TopicInfo,
    app: str,
    partition: int,
    *,
    token: int | None = None,
    owner: str = "",
) -> None:
    cid = consumer_client_id(ctx, info, app, session)
    try:
        await ctx.engine.unlock(
            info.code, app, partition, token=token, client_id=cid, owner=owner, held=True
        )
    except Exception:  # best effort: the lock expires anyway
        log.warning("JMQ4 could not release %s/%s for %s", info.code, partition, app)


async def heartbeat(ctx: ServerContext, session: Session, header: Header, req: object) -> Frame:
    """No connection needed."""
    return boolean_ack(header)


async def fetch_health(ctx: ServerContext, session: Session, header: Header, req: object) -> Frame:
    """Always 0.0, as the reference."""
    return response_frame(header, FetchHealthResponse(point=0.0))


def _registration_id(session: Session, sequence: int, kind: str, app: str, topic: str) -> str:
    text = f"{session.connection_id}_{sequence}_{kind}_{app}_{topic}"
    return text[:32767]


def _check_topics(topics: tuple[str, ...], check) -> None:
    """Names first (status 6, §8.5), then the engine's gate for each topic (status 1)."""
    for topic in topics:
        if validate_name(topic) is not None:
            raise Reject(Code.CN_PARAM_ERROR, "invalid topic name")
    for topic in topics:
        try:
            check(topic)
        except InvalidMessage as exc:
            raise Reject(Code.CN_PARAM_ERROR, str(exc)) from None
        except (AccessDenied, TopicNotFound) as exc:
            raise Reject(Code.CN_NO_PERMISSION, str(exc)) from None
        except EngineError as exc:
            raise Reject(engine_code(exc), str(exc)) from None


async def add_consumer(
    ctx: ServerContext, session: Session, header: Header, req: AddConsumerRequest
) -> Frame:
    """Every topic needs a consumer subscription for the app, otherwise status 1."""
    session.authorize(req.app, ctx.snapshot)
    _check_topics(req.topics, lambda topic: ctx.engine.authorize_consumer(topic, req.app))
    entries = []
    for topic in req.topics:
        key = (topic, req.app)
        if key not in session.consumers:
            session.consumers[key] = _registration_id(
                session, req.sequence, "consumer", req.app, topic
            )
        entries.append(RegisteredTopic(topic=topic, id=session.consumers[key]))
    return response_frame(header, AddConsumerResponse(entries=tuple(entries)))


async def add_producer(
    ctx: ServerContext, session: Session, header: Header, req: AddProducerRequest
) -> Frame:
    """Every topic needs a producer subscription for the app, otherwise status 1."""
    session.authorize(req.app, ctx.snapshot)
    _check_topics(req.topics, lambda topic: ctx.engine.authorize_producer(topic, req.app))
    entries = []
    for topic in req.topics:
        key = (topic, req.app)
        if key not in session.producers:
            session.producers[key] = _registration_id(
                session, req.sequence, "producer", req.app, topic
            )
        entries.append(RegisteredTopic(topic=topic, id=session.producers[key]))
    return response_frame(header, AddProducerResponse(entries=tuple(entries)))


async def remove_consumer(
    ctx: ServerContext, session: Session, header: Header, req: RemoveConsumerRequest
) -> Frame:
    """Drop the consumer registrations."""
    session.authorize(req.app, ctx.snapshot)
    for topic in req.topics:
        session.consumers.pop((topic, req.app), None)
    return boolean_ack(header)


async def remove_producer(
    ctx: ServerContext, session: Session, header: Header, req: RemoveProducerRequest
) -> Frame:
    """Drop the producer registrations."""
    session.authorize(req.app, ctx.snapshot)
    for topic in req.topics:
        session.producers.pop((topic, req.app), None)
    return boolean_ack(header)


HANDLERS = {
    CommandType.ADD_CONNECTION: add_connection,
    CommandType.REMOVE_CONNECTION: remove_connection,
    CommandType.HEARTBEAT: heartbeat,
    CommandType.FETCH_HEALTH: fetch_health,
    CommandType.ADD_CONSUMER: add_consumer,
    CommandType.REMOVE_CONSUMER: remove_consumer,
    CommandType.ADD_PRODUCER: add_producer,
    CommandType.REMOVE_PRODUCER: remove_producer,
}
