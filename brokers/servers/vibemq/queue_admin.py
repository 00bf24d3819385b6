"""Queue management commands (vibemq.md §8) and auto-creation (§6, §7).

Queues live in the catalog as one-partition topics; the rows are written through
:mod:`.catalog_ops` and the watcher is refreshed at once, so this connection's next
command sees the change (other processes see it within a second).
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from brokers.engine import EngineError, dead_letter_parent
from brokers.protocols.vibemq import (
    CreateQueue,
    DeleteQueue,
    DeliveryMode,
    ErrorCode,
    Header,
    ListQueues,
    OverflowStrategy,
    ProtocolError,
    QueueInfo,
    QueueInfoPayload,
    parse_queue_options,
)
from brokers.protocols.vibemq.options import DLQ_SUFFIX
from brokers.servers.vibemq.session import Session
from brokers.topic_codes import is_topic_code

if TYPE_CHECKING:
    from brokers.servers.vibemq.catalog_ops import QueueSpec

CREATED_ELSEWHERE_WAIT_S = 5.0
"""How long an auto-create that lost the race waits for the winner's catalog delta."""


def _catalog_ops():
    """The ORM side, imported on first use: a server without queue management to do (a
    benchmark on a fixed snapshot) runs without Django."""
    from brokers.servers.vibemq import catalog_ops

    return catalog_ops


log = logging.getLogger("mqcloud.vibemq")


def _spec(session: Session, queue: str, **settings: object) -> QueueSpec:
    creator = f"vibemq:{session.app_code or 'anonymous'}"
    team = session.app.team if session.app is not None else ""
    return _catalog_ops().QueueSpec(
        code=queue,
        team=team,
        app=session.app_code,
        creator=creator,
        **settings,  # type: ignore[arg-type]
    )


async def _create(session: Session, spec: QueueSpec, dlq: str | None, rid: str) -> bool | None:
    """Create in the catalog; True created, False existed, None after an error reply."""
    if not is_topic_code(spec.code):
        session.error(ErrorCode.INVALID_QUEUE, "not a queue name (§13)", rid)
        return None
    ops = _catalog_ops()
    try:
        created = await ops.create_queue(spec, dlq, session.ctx.broker_id)
    except ops.CatalogRefused as exc:
        session.error(ErrorCode.SERVER_ERROR, f"queue not created: {exc}", rid)
        return None
    await session.ctx.watcher.refresh()
    return created


async def _published(session: Session, queue: str) -> None:
    """Wait (a bounded while) for the catalog to hold a queue someone else created: its
    row is committed before the creator's catalog delta reaches Redis."""
    ctx = session.ctx
    deadline = asyncio.get_running_loop().time() + CREATED_ELSEWHERE_WAIT_S
    while ctx.queue_settings(queue) is None and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.02)
        await ctx.watcher.refresh()


async def ensure(session: Session, queue: str, rid: str) -> bool:
    """The queue exists (auto-created with the defaults if allowed); else an error is sent."""
    ctx = session.ctx
    if ctx.queue_settings(queue) is not None:
        return True
    if ctx.config.auto_create:
        created = await _create(session, _spec(session, queue), None, rid)
        if created is None:
            return False
        if not created:  # another connection or process created it just now
            await _published(session, queue)
    else:
        await ctx.watcher.refresh()
    if ctx.queue_settings(queue) is None:
        code = ErrorCode.SERVER_ERROR if ctx.config.auto_create else ErrorCode.QUEUE_NOT_FOUND
        session.error(code, f"queue {queue} not found", rid)
        return False
    return True


async def create(session: Session, frame: CreateQueue) -> None:
    """createQueue: options from headers; QUEUE_EXISTS if it is already there."""
    try:
        options = parse_queue_options(frame)
    except ProtocolError as exc:
        return session.error(exc.error_code or ErrorCode.INVALID_MESSAGE, str(exc), frame.id)
    default_dlq = frame.queue + DLQ_SUFFIX
    dlq_name = options.dead_letter_queue_name or default_dlq
    custom = dlq_name != default_dlq
    if custom and (dlq_name == frame.queue or not is_topic_code(dlq_name)):
        return session.error(
            ErrorCode.INVALID_QUEUE,
            f"{Header.DEAD_LETTER_QUEUE_NAME} must be a queue name other than the queue's",
            frame.id,
        )
    if session.ctx.queue_settings(frame.queue) is not None:
        return session.error(ErrorCode.QUEUE_EXISTS, f"queue {frame.queue} exists", frame.id)
    if options.enable_dead_letter_queue and not is_topic_code(dlq_name):  # unaddressable
        return session.error(ErrorCode.INVALID_QUEUE, f"{dlq_name!r} too long", frame.id)
    dead_letters = (
        options.enable_dead_letter_queue
        or options.overflow_strategy is OverflowStrategy.REDIRECT_TO_DLQ
    )
    if dead_letters and session.ctx.queue_settings(dlq_name):
        # another queue's messages (the default name too: a queue called <queue>.dlq made
        # first, maybe by another team): dead letters of this one must not land among them
        return session.error(
            ErrorCode.QUEUE_EXISTS, f"dead-letter queue {dlq_name} exists", frame.id
        )
    spec = _spec(
        session,
        frame.queue,
        delivery_mode=options.delivery_mode.value,
        max_queue_size=options.max_queue_size,
        overflow_policy=options.overflow_strategy.value,
        message_ttl_ms=options.message_ttl,
        dead_letter_enabled=options.enable_dead_letter_queue,
        max_retry_attempts=options.max_retry_attempts,
        dead_letter_queue=dlq_name if custom else "",
    )
    dlq = dlq_name if options.enable_dead_letter_queue else None
    created = await _create(session, spec, dlq, frame.id)
    if created is None:
        return
    if not created:
        return session.error(ErrorCode.QUEUE_EXISTS, f"queue {frame.queue} exists", frame.id)
    payload = await _info(session, frame.queue)
    session.send(CreateQueue(id=frame.id, queue=frame.queue, payload=payload))


async def delete(session: Session, frame: DeleteQueue) -> None:
    """deleteQueue: the row, the messages, in-flight tracking and subscriptions — only by
    an app of the team that owns the queue (an implicit DLQ: its queue's team)."""
    ctx, queue = session.ctx, frame.queue
    info = ctx.snapshot.topics.get(queue)
    if ctx.queue_settings(queue) is None:
        return session.error(ErrorCode.QUEUE_NOT_FOUND, f"queue {queue} not found", frame.id)
    ops = _catalog_ops()
    owner = info if info is not None else dead_letter_parent(ctx.snapshot, queue)
    app = session.app
    team = app.team if app is not None else ops.ANONYMOUS_TEAM
    if owner is not None and not (app is not None and app.admin) and owner.team != team:
        return session.error(ErrorCode.FORBIDDEN, f"queue {queue} is another team's", frame.id)
    try:
        await ctx.engine.purge(queue)  # while the catalog still names its groups
        if info is not None:
            await ops.delete_queue(queue)
            await ctx.watcher.refresh()
    except ops.CatalogRefused as exc:
        return session.error(ErrorCode.SERVER_ERROR, str(exc), frame.id)
    except EngineError as exc:
        return session.error(ErrorCode.SERVER_ERROR, f"queue not purged: {exc}", frame.id)
    await session.hub.drop_queue(queue)
    session.send(DeleteQueue(id=frame.id, queue=queue))


async def _info(session: Session, queue: str) -> QueueInfoPayload:
    ctx = session.ctx
    settings = ctx.queue_settings(queue)
    assert settings is not None
    stats = await ctx.engine.queue_stats(queue)
    topic = ctx.snapshot.topics.get(queue)
    created_ms = topic.created_ms if topic is not None else ctx.engine.now_ms()
    # the setting as it stands (§8: default ``<queue>.dlq``), whether the DLQ is on or not
    dlq = settings.dead_letter_queue or queue + DLQ_SUFFIX
    return QueueInfoPayload(
        name=queue,
        message_count=stats.message_count,
        subscriber_count=await ctx.registry.count(queue),
        delivery_mode=DeliveryMode(settings.delivery_mode),
        max_size=settings.max_queue_size,
        created_at=datetime.fromtimestamp(created_ms / 1000, UTC),
        in_flight_count=stats.in_flight,
        message_ttl=settings.message_ttl_ms,
        enable_dead_letter_queue=settings.dead_letter_enabled,
        dead_letter_queue_name=dlq,
        max_retry_attempts=settings.max_retry_attempts,
        overflow_strategy=OverflowStrategy(settings.overflow_policy),
    )


async def info(session: Session, frame: QueueInfo) -> None:
    """queueInfo: counts and settings."""
    if session.ctx.queue_settings(frame.queue) is None:
        await session.ctx.watcher.refresh()
        if session.ctx.queue_settings(frame.queue) is None:
            return session.error(
                ErrorCode.QUEUE_NOT_FOUND, f"queue {frame.queue} not found", frame.id
            )
    try:
        payload = await _info(session, frame.queue)
    except EngineError as exc:
        return session.error(ErrorCode.SERVER_ERROR, str(exc), frame.id)
    session.send(QueueInfo(id=frame.id, queue=frame.queue, payload=payload))


def list_queues(session: Session, frame: ListQueues) -> None:
    """listQueues: every queue name, DLQs included, sorted."""
    session.send(ListQueues(id=frame.id, payload=session.ctx.queue_names()))
