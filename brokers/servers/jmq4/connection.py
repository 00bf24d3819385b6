"""Connection-level commands (spec §5.1, §5.2, §6.1): ADD/REMOVE_CONNECTION, HEARTBEAT,
FETCH_HEALTH and the ADD/REMOVE_CONSUMER/PRODUCER registrations."""

from __future__ import annotations

from brokers.engine import AccessDenied, EngineError, InvalidMessage, TopicNotFound
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
from brokers.servers.jmq4.context import ServerContext
from brokers.servers.jmq4.errors import Reject, engine_code
from brokers.servers.jmq4.session import Session


async def add_connection(
    ctx: ServerContext, session: Session, header: Header, req: AddConnectionRequest
) -> Frame:
    """Check app + token against the catalog (status 2 on failure); idempotent."""
    if session.established:
        return response_frame(header, AddConnectionResponse(connection_id=session.connection_id))
    known = validate_name(req.app) is None and ctx.engine.app_for_token(req.token) == req.app
    if not known:
        raise Reject(Code.CN_AUTHENTICATION_ERROR, f"app {req.app} authentication failed")
    connection_id = session.establish(req.app, req.region, ctx.broker_id)
    return response_frame(header, AddConnectionResponse(connection_id=connection_id))


async def remove_connection(
    ctx: ServerContext, session: Session, header: Header, req: object
) -> Frame:
    """Forget the session and release the partitions it still holds."""
    if not session.established:
        raise Reject(Code.FW_CONNECTION_NOT_EXISTS, "connection not exists")
    await release_locks(ctx, session)
    session.reset()
    return boolean_ack(header)


async def release_locks(ctx: ServerContext, session: Session) -> None:
    """Release every partition lock the session fetched and did not ack."""
    held, session.locks = session.locks, {}
    for (topic, app, partition), token in held.items():
        try:
            await ctx.engine.unlock(topic, app, partition, token=token)
        except Exception:  # best effort: the lock expires anyway
            continue


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
