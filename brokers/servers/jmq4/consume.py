"""Consumer commands (spec §5.5, §6.2–§6.5): FETCH_TOPIC_MESSAGE, FETCH_PARTITION_MESSAGE,
COMMIT_ACK, COMMIT_ACK_INDEX and FETCH_INDEX, each mapped onto the engine."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from itertools import groupby

from brokers.engine import (
    RETRY_PARTITION,
    Delivery,
    EngineError,
    FetchResult,
    FetchStatus,
    IndexOutOfRange,
    TopicInfo,
)
from brokers.engine import RetryType as EngineRetryType
from brokers.protocols.jmq4 import (
    ACK_INDEX_MAX,
    ACK_INDEX_MIN,
    AckPartition,
    Code,
    CommandType,
    CommitAckIndexRequest,
    CommitAckIndexResponse,
    CommitAckRequest,
    CommitAckResponse,
    FetchIndexRequest,
    FetchIndexResponse,
    FetchPartitionMessageRequest,
    FetchPartitionMessageResponse,
    FetchTopicMessageRequest,
    FetchTopicMessageResponse,
    Frame,
    Header,
    IndexResultTopic,
    PartitionCode,
    PartitionFetch,
    PartitionIndexResult,
    PartitionMessages,
    PartitionMessagesTopic,
    TopicFetch,
    TopicMessages,
    TopicPartitionCodes,
    missing_topic_code,
    response_frame,
    validate_name,
)
from brokers.servers.jmq4.context import ServerContext
from brokers.servers.jmq4.errors import engine_code
from brokers.servers.jmq4.frame_budget import FrameBudget
from brokers.servers.jmq4.partitions import leads, local_partitions
from brokers.servers.jmq4.session import Session
from brokers.servers.jmq4.stored import StoredMessage

_STATUS_CODES = {
    FetchStatus.PAUSED: Code.FW_FETCH_TOPIC_MESSAGE_PAUSED,
    FetchStatus.BLACKLISTED: Code.FW_GET_MESSAGE_APP_CLIENT_IP_NOT_READ,
}

log = logging.getLogger(__name__)


def _messages(deliveries: tuple[Delivery, ...] | list[Delivery]) -> tuple[StoredMessage, ...]:
    return tuple(StoredMessage(d.record) for d in deliveries)


def consumer_client_id(
    ctx: ServerContext, topic: TopicInfo, app: str, session: Session
) -> str | None:
    """Broadcast consumers are tracked per client IP; clustering ones per app."""
    try:
        broadcast = ctx.engine.is_broadcast(topic.code, app)
    except EngineError:
        broadcast = topic.type == "broadcast"
    return session.peer_host if broadcast else None


async def _fetch_topic(
    ctx: ServerContext,
    session: Session,
    req: FetchTopicMessageRequest,
    entry: TopicFetch,
    long_poll_ms: int,
    budget: FrameBudget,
) -> TopicMessages:
    snapshot = ctx.snapshot
    topic = snapshot.topics.get(entry.topic)
    if topic is None:
        return TopicMessages(topic=entry.topic, code=missing_topic_code(entry.topic))
    if (entry.topic, req.app) not in session.consumers:
        return TopicMessages(topic=entry.topic, code=Code.FW_CONSUMER_NOT_EXISTS)
    led = local_partitions(topic, ctx.broker_id)
    if not led:
        return TopicMessages(topic=entry.topic, code=Code.FW_FETCH_TOPIC_MESSAGE_BROKER_NOT_LEADER)
    client_id = consumer_client_id(ctx, topic, req.app, session)
    # §6.2: beyond the waiting limits the fetch looks once and answers at once
    parked = long_poll_ms > 0 and ctx.long_polls.take(entry.topic, req.app, client_id, len(led))
    try:
        wait = long_poll_ms if parked else 0
        return await _fetch(ctx, session, req, entry, client_id, wait, budget)
    finally:
        if parked:
            ctx.long_polls.give_back(entry.topic, req.app, client_id)


async def _fetch(
    ctx: ServerContext,
    session: Session,
    req: FetchTopicMessageRequest,
    entry: TopicFetch,
    client_id: str | None,
    long_poll_ms: int,
    budget: FrameBudget,
) -> TopicMessages:
    owner = session.connection_id
    try:
        result: FetchResult = await ctx.engine.fetch(
            entry.topic,
            req.app,
            count=entry.count,
            ack_timeout_ms=req.ack_timeout,
            long_poll_ms=long_poll_ms,
            owner=owner,
            client_id=client_id,
            address=session.address,
            held=True,  # the connection's lock: handed on if this process dies
            max_bytes=budget.room(entry.count),
        )
    except EngineError as exc:
        return TopicMessages(topic=entry.topic, code=engine_code(exc))
    except asyncio.CancelledError:
        session.cut_short.add((entry.topic, req.app, owner))
        raise
    if result.status in _STATUS_CODES:
        return TopicMessages(topic=entry.topic, code=_STATUS_CODES[result.status])
    if result.found and result.messages and budget.too_large(result.messages[0]):
        await _fail_too_large(ctx, entry.topic, req.app, result, client_id, owner)
        return TopicMessages(topic=entry.topic)  # the next fetch goes on past it
    sent, unsent = budget.take(result.messages)
    if result.found and result.partition == RETRY_PARTITION:
        fetched = session.retries.setdefault((entry.topic, req.app), set())
        fetched.update(d.index for d in sent)
        if unsent:  # due again at once, not after their lease; not consumed
            await _give_back_retries(ctx, entry.topic, req.app, unsent, client_id)
    elif result.found and result.lock_token:
        if sent:  # the client's ack of what it got releases the lock (§6.4)
            session.locks[(entry.topic, req.app, result.partition)] = result.lock_token
        else:  # no room left in this response: the partition is free again at once
            await _give_back_partition(ctx, entry.topic, req.app, result, client_id, owner)
    return TopicMessages(topic=entry.topic, messages=_messages(sent))


async def _fail_too_large(
    ctx: ServerContext,
    topic: str,
    app: str,
    result: FetchResult,
    client_id: str | None,
    owner: str,
) -> None:
    """Fail the fetch's first message, larger than any response frame (frame_budget.py),
    as a consumer's failure (retry, then dead letter) and give back what came after it;
    the failure's ack releases the lock."""
    first, rest = result.messages[0], list(result.messages[1:])
    indexes = range(first.index, first.index + max(1, first.count))
    log.warning(
        "JMQ4: %s message %s:%d of %d bytes is over the frame maximum %d: failed for %s",
        topic,
        "retry" if result.partition == RETRY_PARTITION else result.partition,
        first.index,
        len(first.record),
        ctx.config.max_frame_size,
        app,
    )
    try:
        await ctx.engine.ack(
            topic,
            app,
            result.partition,
            indexes,
            retry_type=EngineRetryType.OTHER,
            owner=owner,
            token=result.lock_token or None,
            client_id=client_id,
            reason=f"message over the JMQ4 frame maximum ({ctx.config.max_frame_size} bytes)",
            held=True,
        )
    except EngineError as exc:  # else its lock lapses and the next fetch fails it
        log.info("JMQ4: failing an oversize message of %s not applied: %s", topic, exc)
    if result.partition == RETRY_PARTITION and rest:
        await _give_back_retries(ctx, topic, app, rest, client_id)


async def _give_back_retries(
    ctx: ServerContext, topic: str, app: str, unsent: list[Delivery], client_id: str | None
) -> None:
    """Retries a fetch read but did not send: due again at once, and not consumed."""
    with contextlib.suppress(EngineError):  # else their lease lapses
        await ctx.engine.unlock_retries(
            topic, app, [d.index for d in unsent], client_id=client_id, unsent=unsent
        )


async def _give_back_partition(
    ctx: ServerContext,
    topic: str,
    app: str,
    result: FetchResult,
    client_id: str | None,
    owner: str,
) -> None:
    with contextlib.suppress(EngineError):  # else the lock lapses
        await ctx.engine.unlock(
            topic,
            app,
            result.partition,
            token=result.lock_token,
            client_id=client_id,
            owner=owner,
            held=True,
            unsent=result.messages,  # never sent: not consumed
        )


async def fetch_topic_message(
    ctx: ServerContext, session: Session, header: Header, req: FetchTopicMessageRequest
) -> Frame:
    """Broker-managed consumption; long polls only for a single topic."""
    session.authorize(req.app, ctx.snapshot)
    long_poll = 0
    if len(req.topics) == 1 and req.long_poll_timeout > 0:
        long_poll = min(req.long_poll_timeout, ctx.config.max_long_poll_ms)
    budget = FrameBudget(ctx.config.max_frame_size)
    topics = tuple(
        [await _fetch_topic(ctx, session, req, e, long_poll, budget) for e in req.topics]
    )
    return response_frame(header, FetchTopicMessageResponse(topics=topics))


async def _start_index(
    ctx: ServerContext, topic: str, app: str, partition: int, cid: str | None
) -> int:
    progress = (await ctx.engine.progress(topic, app, client_id=cid, partitions=[partition]))[0]
    if progress.ack_index < 0:
        return progress.min_index
    return max(progress.ack_index, progress.min_index)


async def _fetch_partition(
    ctx: ServerContext,
    session: Session,
    app: str,
    topic: TopicInfo,
    entry: PartitionFetch,
    budget: FrameBudget,
) -> PartitionMessages:
    p = entry.partition
    if not 0 <= p < topic.partitions:
        return PartitionMessages(partition=p, code=Code.CN_PARAM_ERROR)
    if not leads(topic, p, ctx.broker_id):
        return PartitionMessages(partition=p, code=Code.FW_FETCH_TOPIC_MESSAGE_BROKER_NOT_LEADER)
    try:
        ctx.engine.authorize_consumer(topic.code, app, session.address)
        index = entry.index
        if index == -1:
            cid = consumer_client_id(ctx, topic, app, session)
            index = await _start_index(ctx, topic.code, app, p, cid)
        count = max(1, min(entry.count, 1000)) if entry.count > 0 else 1
        deliveries = await ctx.engine.consume_read(
            topic.code, app, p, index, count, address=session.address
        )
    except IndexOutOfRange:
        return PartitionMessages(partition=p, code=Code.FW_FETCH_MESSAGE_INDEX_OUT_OF_RANGE)
    except EngineError as exc:
        return PartitionMessages(partition=p, code=engine_code(exc))
    if deliveries and budget.too_large(deliveries[0]):  # never fits a frame: said, not sent
        return PartitionMessages(partition=p, code=Code.CN_PARAM_ERROR)
    sent, _ = budget.take(deliveries)  # no lock: the client reads on from what it got
    return PartitionMessages(partition=p, messages=_messages(sent))


async def fetch_partition_message(
    ctx: ServerContext, session: Session, header: Header, req: FetchPartitionMessageRequest
) -> Frame:
    """Client-managed consumption: no lock, no retry partition."""
    snapshot = ctx.snapshot
    session.authorize(req.app, snapshot)
    budget = FrameBudget(ctx.config.max_frame_size)
    out = []
    for entry in req.topics:
        topic = snapshot.topics.get(entry.topic)
        if topic is None:
            parts = tuple(
                PartitionMessages(partition=p.partition, code=missing_topic_code(entry.topic))
                for p in entry.partitions
            )
        else:
            parts = tuple(
                [
                    await _fetch_partition(ctx, session, req.app, topic, p, budget)
                    for p in entry.partitions
                ]
            )
        out.append(PartitionMessagesTopic(topic=entry.topic, partitions=parts))
    return response_frame(header, FetchPartitionMessageResponse(topics=tuple(out)))


def _contiguous(indexes: list[int]) -> bool:
    return len(set(indexes)) == len(indexes) and max(indexes) - min(indexes) + 1 == len(indexes)


async def _ack_partition(
    ctx: ServerContext, session: Session, topic: str, app: str, part: AckPartition
) -> int:
    acks = sorted(part.acks, key=lambda a: a.index)
    if not acks or not _contiguous([a.index for a in acks]):
        return Code.FW_CONSUMER_ACK_FAIL
    info = ctx.snapshot.topics.get(topic)
    if info is None:
        return missing_topic_code(topic)
    cid = consumer_client_id(ctx, info, app, session)
    token = session.locks.get((topic, app, part.partition))
    try:
        for retry_type, run in groupby(acks, key=lambda a: a.retry_type):
            indexes = [a.index for a in run]
            await ctx.engine.ack(
                topic,
                app,
                part.partition,
                range(indexes[0], indexes[-1] + 1),
                retry_type=EngineRetryType(int(retry_type)),
                owner=session.connection_id,
                token=token,
                client_id=cid,
                held=True,
            )
    except EngineError as exc:
        return engine_code(exc)
    if part.partition == RETRY_PARTITION:
        session.retries.get((topic, app), set()).difference_update(a.index for a in acks)
    session.locks.pop((topic, app, part.partition), None)
    return Code.SUCCESS


async def commit_ack(
    ctx: ServerContext, session: Session, header: Header, req: CommitAckRequest
) -> Frame:
    """Per partition: contiguous, duplicate-free indexes (else 140), then the engine ack."""
    session.authorize(req.app, ctx.snapshot)
    out = []
    for entry in req.topics:
        codes = tuple(
            [
                PartitionCode(
                    partition=p.partition,
                    code=await _ack_partition(ctx, session, entry.topic, req.app, p),
                )
                for p in entry.partitions
            ]
        )
        out.append(TopicPartitionCodes(topic=entry.topic, partitions=codes))
    return response_frame(header, CommitAckResponse(topics=tuple(out)))


async def commit_ack_index(
    ctx: ServerContext, session: Session, header: Header, req: CommitAckIndexRequest
) -> Frame:
    """Set ack indexes (−1 = max, −2 = min); only failing partitions are listed."""
    snapshot = ctx.snapshot
    session.authorize(req.app, snapshot)
    out = []
    for entry in req.topics:
        failed = []
        topic = snapshot.topics.get(entry.topic)
        for p in entry.partitions:
            position: str | int = p.index
            if p.index == ACK_INDEX_MAX:
                position = "latest"
            elif p.index == ACK_INDEX_MIN:
                position = "earliest"
            elif p.index < 0:
                failed.append(PartitionCode(partition=p.partition, code=Code.CN_PARAM_ERROR))
                continue
            try:
                cid = consumer_client_id(ctx, topic, req.app, session) if topic else None
                await ctx.engine.reset_offsets(
                    entry.topic,
                    req.app,
                    position=position,
                    partition=p.partition,
                    client_id=cid,
                    by_client=True,
                )
            except EngineError as exc:
                failed.append(PartitionCode(partition=p.partition, code=engine_code(exc)))
        if failed:
            out.append(TopicPartitionCodes(topic=entry.topic, partitions=tuple(failed)))
    return response_frame(header, CommitAckIndexResponse(topics=tuple(out)))


async def fetch_index(
    ctx: ServerContext, session: Session, header: Header, req: FetchIndexRequest
) -> Frame:
    """Ack index per partition (−1 if unknown) and, from version 3, the min/max indexes."""
    snapshot = ctx.snapshot
    session.authorize(req.app, snapshot)
    out = []
    for entry in req.topics:
        if validate_name(entry.topic) is not None:  # §8.5: code 6 on each partition
            results = [
                PartitionIndexResult(partition=p, index=-1, code=Code.CN_PARAM_ERROR)
                for p in entry.partitions
            ]
            out.append(IndexResultTopic(topic=entry.topic, partitions=tuple(results)))
            continue
        topic = snapshot.topics.get(entry.topic)
        known = [p for p in entry.partitions if topic is not None and 0 <= p < topic.partitions]
        progress = {}
        failed = False
        if known and topic is not None:
            try:
                cid = consumer_client_id(ctx, topic, req.app, session)
                rows = await ctx.engine.progress(
                    entry.topic, req.app, client_id=cid, partitions=known
                )
                progress = {row.partition: row for row in rows}
            except EngineError:
                failed = True
        results = []
        for p in entry.partitions:
            row = progress.get(p)
            if row is None:
                code = Code.CN_UNKNOWN_ERROR if failed and p in known else Code.SUCCESS
                results.append(PartitionIndexResult(partition=p, index=-1, code=code))
                continue
            index = row.ack_index if row.ack_index >= 0 else row.min_index
            results.append(
                PartitionIndexResult(
                    partition=p,
                    index=max(index, row.min_index),
                    left_index=row.min_index,
                    right_index=row.max_index,
                )
            )
        out.append(IndexResultTopic(topic=entry.topic, partitions=tuple(results)))
    return response_frame(header, FetchIndexResponse(topics=tuple(out)))


HANDLERS = {
    CommandType.FETCH_TOPIC_MESSAGE: fetch_topic_message,
    CommandType.FETCH_PARTITION_MESSAGE: fetch_partition_message,
    CommandType.COMMIT_ACK: commit_ack,
    CommandType.COMMIT_ACK_INDEX: commit_ack_index,
    CommandType.FETCH_INDEX: fetch_index,
}
