"""PRODUCE_MESSAGE (spec §5.6, §6.8): checks per topic entry, then one engine append each.

The messages' bytes are stored as received: the codec hands them over as one contiguous
:class:`WireMessages`, and the engine's append checks them against its record rules while
it patches partition, index, storeTime and clientIp into one copy (one walk). The protocol's
own checks (names, one partition per entry, the §8.5 body limit and batch bodies) come
first; a record the engine refuses fails its entry with the engine's code. Entries run
concurrently and a topic not done within the produce timeout is reported with code 108.
"""

from __future__ import annotations

import asyncio
import random
from functools import reduce
from operator import or_

from brokers.engine import (
    PRIORITY_MODE,
    EngineError,
    InvalidMessage,
    QoS,
    TopicInfo,
    WireBlob,
    band_of,
)
from brokers.protocols.jmq4 import (
    FAILED_ITEM,
    SYS_BATCH,
    Code,
    CommandType,
    DecodeError,
    EncodeError,
    Frame,
    Header,
    ProducedItems,
    ProduceMessageRequest,
    ProduceMessageResponse,
    ProduceTopic,
    ProduceTopicResult,
    WireMessages,
    response_frame,
    validate_name,
)
from brokers.protocols.jmq4.validation import MAX_BODY_SIZE
from brokers.servers.jmq4.context import ServerContext
from brokers.servers.jmq4.errors import engine_code
from brokers.servers.jmq4.partitions import choose_local, leads, local_partitions
from brokers.servers.jmq4.session import Session

_rng = random.Random()
QOS_LEVELS = {0: QoS.NONE, 1: QoS.RECEIVED, 2: QoS.PERSISTED}
"""JMQ4 qosLevel 0–4 (ONE_WAY, RECEIVE, PERSISTENCE, REPLICATION, ALL) as engine QoS."""
_ORDERED = 0x2


def _failed(topic: str, code: int, count: int) -> ProduceTopicResult:
    """The entry failed: one (−1, −1, −1) item per message sent (§5.6), none for none."""
    return ProduceTopicResult(topic=topic, code=code, items=(FAILED_ITEM,) * count)


def _wire(entry: ProduceTopic) -> WireMessages | None:
    """The entry's messages as wire bytes (decoded entries already are); None if unencodable."""
    if isinstance(entry.messages, WireMessages):
        return entry.messages
    try:
        return WireMessages.from_messages(entry.messages)
    except (EncodeError, DecodeError):
        return None


def _band(topic: TopicInfo, messages: WireMessages) -> int | None:
    """The band partition of the first message on a PriorityBased topic (its priority
    byte, the engine's :func:`~brokers.engine.band_of`); None on other topics."""
    if topic.queue.delivery_mode != PRIORITY_MODE or not messages.offsets:
        return None
    return band_of(topic, messages.data, messages.offsets[0])


def _check(topic: str, messages: WireMessages) -> int | None:
    """The protocol's code that fails this entry before any write, or None.

    The engine checks every record when it appends (size, magic, reserved sysCode bits,
    businessId, batch flag and body, its own body limit); the protocol adds one partition
    per entry, the §8.5 body limit and its own reading of an uncompressed batch body.
    """
    if validate_name(topic) is not None or not messages:
        return Code.CN_PARAM_ERROR
    partitions = messages.partitions
    if partitions.count(partitions[0]) != len(partitions):
        return Code.CN_PARAM_ERROR
    if messages.max_body_size > MAX_BODY_SIZE:
        return Code.CN_PARAM_ERROR
    if reduce(or_, messages.sys_codes) & SYS_BATCH:
        for i, sys_code in enumerate(messages.sys_codes):
            if sys_code & SYS_BATCH and messages.batch_rejected(i):
                return Code.CN_PARAM_ERROR
    return None


def _refused(
    ctx: ServerContext, topic: str, messages: WireMessages, code: int
) -> ProduceTopicResult:
    """The entry fails with ``code`` (a topic, leader or policy rule), unless one of its
    records breaks the engine's rules: §8.5 reports a bad message (code 6) first. The
    records are checked here only on this failing path; a write checks them as it stamps."""
    try:
        ctx.engine.check_wire(messages.data, len(messages))
    except EngineError as exc:
        code = engine_code(exc)
    return _failed(topic, code, len(messages))


async def _produce_topic(
    ctx: ServerContext, session: Session, app: str, entry: ProduceTopic
) -> ProduceTopicResult:
    count = len(entry.messages)
    messages = _wire(entry)
    if messages is None:
        return _failed(entry.topic, Code.CN_PARAM_ERROR, count)
    code = _check(entry.topic, messages)
    if code is not None:
        return _failed(entry.topic, code, count)
    records = WireBlob(messages.data, len(messages))
    topic = ctx.snapshot.topics.get(entry.topic)
    if topic is None:
        return _refused(ctx, entry.topic, messages, Code.FW_TOPIC_NOT_EXIST)
    partition = messages.partitions[0]
    if partition >= 0:
        if partition >= topic.partitions:
            return _refused(ctx, entry.topic, messages, Code.CN_PARAM_ERROR)
        if not leads(topic, partition, ctx.broker_id):
            return _refused(ctx, entry.topic, messages, Code.FW_PRODUCE_MESSAGE_BROKER_NOT_LEADER)
    else:
        local = local_partitions(topic, ctx.broker_id)
        if not local:
            return _refused(ctx, entry.topic, messages, Code.FW_PRODUCE_MESSAGE_BROKER_NOT_LEADER)
        band = _band(topic, messages)
        if band is not None and band in local:  # a priority topic: the message's band
            partition = band
        else:
            ordered = bool(messages.sys_codes[0] & _ORDERED) or topic.type == "sequential"
            business_id = messages[0].business_id if ordered else ""
            partition = choose_local(local, ordered=ordered, business_id=business_id, rng=_rng)
    try:
        if entry.tx_id:
            await ctx.engine.append_to_transaction(
                entry.topic,
                app,
                entry.tx_id,
                records,
                partition=partition,
                client_address=session.address,
            )
            items = ProducedItems(partition, (-1,) * count, messages.send_times)
            return ProduceTopicResult(topic=entry.topic, items=items)
        result = await ctx.engine.append(
            entry.topic,
            app,
            records,
            partition=partition,
            qos=QOS_LEVELS.get(entry.qos, QoS.REPLICATED),
            client_address=session.address,
            as_leader=ctx.broker_id if topic.groups else None,
        )
    except InvalidMessage as exc:  # a record the engine refused while stamping
        return _failed(entry.topic, engine_code(exc), count)
    except EngineError as exc:
        return _refused(ctx, entry.topic, messages, engine_code(exc))
    items = ProducedItems(result.partition, result.indexes, messages.send_times)
    return ProduceTopicResult(topic=entry.topic, items=items)


async def produce_message(
    ctx: ServerContext, session: Session, header: Header, req: ProduceMessageRequest
) -> Frame:
    """Each topic entry succeeds or fails on its own; unfinished topics get 108."""
    session.authorize(req.app, ctx.snapshot)
    if len(req.topics) == 1:
        results = [await _produce_topic(ctx, session, req.app, req.topics[0])]
    else:
        tasks = [
            asyncio.ensure_future(_produce_topic(ctx, session, req.app, e)) for e in req.topics
        ]
        done, pending = await asyncio.wait(tasks, timeout=ctx.config.produce_timeout)
        for task in pending:
            task.cancel()
        results = []
        for entry, task in zip(req.topics, tasks, strict=True):
            if task in done and task.exception() is None:
                results.append(task.result())
            else:
                code = Code.SE_WRITE_TIMEOUT if task in pending else Code.CN_UNKNOWN_ERROR
                results.append(_failed(entry.topic, code, len(entry.messages)))
    return response_frame(header, ProduceMessageResponse(topics=tuple(results)))


HANDLERS = {CommandType.PRODUCE_MESSAGE: produce_message}
