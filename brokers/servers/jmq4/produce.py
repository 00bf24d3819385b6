"""PRODUCE_MESSAGE (spec §5.6, §6.8): checks per topic entry, then one engine append each.

The messages' bytes are stored as received (the engine patches partition, index,
storeTime and clientIp in place); entries run concurrently and a topic not done within
the produce timeout is reported with code 108.
"""

from __future__ import annotations

import asyncio
import random

from brokers.engine import EngineError, QoS
from brokers.protocols.jmq4 import (
    FAILED_ITEM,
    Code,
    CommandType,
    Frame,
    Header,
    ProducedItem,
    ProduceMessageRequest,
    ProduceMessageResponse,
    ProduceTopic,
    ProduceTopicResult,
    response_frame,
    validate_message,
    validate_name,
)
from brokers.servers.jmq4.context import ServerContext
from brokers.servers.jmq4.errors import engine_code
from brokers.servers.jmq4.partitions import choose_local, leads, local_partitions
from brokers.servers.jmq4.session import Session

_rng = random.Random()
_ORDERED = 0x2


def _failed(topic: str, code: int, count: int) -> ProduceTopicResult:
    return ProduceTopicResult(topic=topic, code=code, items=(FAILED_ITEM,) * max(count, 1))


def _check(ctx: ServerContext, entry: ProduceTopic) -> int | None:
    """The code that fails this entry before any write, or None."""
    if validate_name(entry.topic) is not None or not entry.messages:
        return Code.CN_PARAM_ERROR
    first = entry.messages[0].partition
    for message in entry.messages:
        if message.partition != first or validate_message(message) is not None:
            return Code.CN_PARAM_ERROR
    return None


async def _produce_topic(
    ctx: ServerContext, session: Session, app: str, entry: ProduceTopic
) -> ProduceTopicResult:
    count = len(entry.messages)
    code = _check(ctx, entry)
    if code is not None:
        return _failed(entry.topic, code, count)
    topic = ctx.snapshot.topics.get(entry.topic)
    if topic is None:
        return _failed(entry.topic, Code.FW_TOPIC_NOT_EXIST, count)
    first = entry.messages[0]
    partition = first.partition
    if partition >= 0:
        if partition >= topic.partitions:
            return _failed(entry.topic, Code.CN_PARAM_ERROR, count)
        if not leads(topic, partition, ctx.broker_id):
            return _failed(entry.topic, Code.FW_PRODUCE_MESSAGE_BROKER_NOT_LEADER, count)
    else:
        local = local_partitions(topic, ctx.broker_id)
        if not local:
            return _failed(entry.topic, Code.FW_PRODUCE_MESSAGE_BROKER_NOT_LEADER, count)
        ordered = bool(first.sys_code & _ORDERED) or topic.type == "sequential"
        partition = choose_local(local, ordered=ordered, business_id=first.business_id, rng=_rng)
    raws = [m.raw for m in entry.messages]
    try:
        if entry.tx_id:
            await ctx.engine.append_to_transaction(
                entry.topic,
                app,
                entry.tx_id,
                raws,
                partition=partition,
                client_address=session.address,
            )
            items = tuple(
                ProducedItem(partition=partition, index=-1, start_time=m.send_time)
                for m in entry.messages
            )
            return ProduceTopicResult(topic=entry.topic, items=items)
        result = await ctx.engine.append(
            entry.topic,
            app,
            raws,
            partition=partition,
            qos=QoS.from_jmq4(entry.qos),
            client_address=session.address,
        )
    except EngineError as exc:
        return _failed(entry.topic, engine_code(exc), count)
    items = tuple(
        ProducedItem(partition=result.partition, index=index, start_time=m.send_time)
        for index, m in zip(result.indexes, entry.messages, strict=True)
    )
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
