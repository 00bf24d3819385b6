"""Transaction commands (spec §5.7, §6.7): PREPARE, COMMIT, ROLLBACK, FETCH_PRODUCE_FEEDBACK."""

from __future__ import annotations

import asyncio

from brokers.engine import EngineError, QoS
from brokers.protocols.jmq4 import (
    Code,
    CommandType,
    CommitRequest,
    CommitResponse,
    FeedbackEntry,
    FetchProduceFeedbackRequest,
    FetchProduceFeedbackResponse,
    Frame,
    Header,
    PrepareRequest,
    PrepareResponse,
    RollbackRequest,
    RollbackResponse,
    response_frame,
)
from brokers.servers.jmq4.context import ServerContext
from brokers.servers.jmq4.errors import Reject, engine_code
from brokers.servers.jmq4.session import Session

DEFAULT_TIMEOUT_MS = 30 * 60 * 1000


async def prepare(
    ctx: ServerContext, session: Session, header: Header, req: PrepareRequest
) -> Frame:
    """Open a transaction; the topic needs an ADD_PRODUCER on this connection (134)."""
    session.authorize(req.app, ctx.snapshot)
    if (req.topic, req.app) not in session.producers:
        raise Reject(Code.FW_PRODUCER_NOT_EXISTS, f"no producer for {req.topic} on this connection")
    try:
        tx_id = await ctx.engine.prepare_transaction(
            req.topic,
            req.app,
            transaction_id=req.transaction_id,
            timeout_ms=req.timeout if req.timeout > 0 else DEFAULT_TIMEOUT_MS,
            client_address=session.address,
        )
    except EngineError as exc:
        return response_frame(header, PrepareResponse(code=engine_code(exc)))
    return response_frame(header, PrepareResponse(tx_id=tx_id[:32767]))


async def commit(ctx: ServerContext, session: Session, header: Header, req: CommitRequest) -> Frame:
    """Append the logged messages; an unknown txId gives 34."""
    session.authorize(req.app, ctx.snapshot)
    try:
        await ctx.engine.commit_transaction(
            req.topic, req.app, req.tx_id, qos=QoS.RECEIVED, client_address=session.address
        )
    except EngineError as exc:
        return response_frame(header, CommitResponse(code=engine_code(exc)))
    return response_frame(header, CommitResponse())


async def rollback(
    ctx: ServerContext, session: Session, header: Header, req: RollbackRequest
) -> Frame:
    """Discard the logged messages; an unknown txId gives 34."""
    session.authorize(req.app, ctx.snapshot)
    try:
        await ctx.engine.rollback_transaction(req.topic, req.app, req.tx_id)
    except EngineError as exc:
        return response_frame(header, RollbackResponse(code=engine_code(exc)))
    return response_frame(header, RollbackResponse())


async def fetch_produce_feedback(
    ctx: ServerContext, session: Session, header: Header, req: FetchProduceFeedbackRequest
) -> Frame:
    """At most one overdue open transaction with a query id (no count on the wire).

    With ``longPollTimeout`` the request waits for one to come due: it sleeps until the
    earliest open transaction's timeout (re-checking at least every second, so one
    prepared meanwhile is seen) or the poll's end.
    """
    session.authorize(req.app, ctx.snapshot)
    loop = asyncio.get_running_loop()
    poll_ms = max(0, min(req.long_poll_timeout, ctx.config.max_long_poll_ms))
    deadline = loop.time() + poll_ms / 1000
    try:
        while True:
            info = await ctx.engine.transaction_feedback(req.topic, req.app)
            remaining = deadline - loop.time()
            if info is not None or remaining <= 0:
                break
            await asyncio.sleep(min(remaining, await _until_next_due(ctx, req)))
    except EngineError as exc:
        return response_frame(header, FetchProduceFeedbackResponse(code=engine_code(exc)))
    entries = ()
    if info is not None:
        entries = (
            FeedbackEntry(topic=info.topic, tx_id=info.tx_id, transaction_id=info.transaction_id),
        )
    return response_frame(header, FetchProduceFeedbackResponse(entries=entries))


async def _until_next_due(ctx: ServerContext, req: FetchProduceFeedbackRequest) -> float:
    """Seconds until an open transaction with a query id passes its timeout (at most 1)."""
    now = ctx.engine.now_ms()
    dues = [
        t.start_ms + t.timeout_ms
        for t in await ctx.engine.open_transactions(req.topic, req.app)
        if t.transaction_id and t.start_ms + t.timeout_ms > now
    ]
    return min([1.0] + [(due - now) / 1000 + 0.005 for due in dues])


HANDLERS = {
    CommandType.PRODUCE_MESSAGE_PREPARE: prepare,
    CommandType.PRODUCE_MESSAGE_COMMIT: commit,
    CommandType.PRODUCE_MESSAGE_ROLLBACK: rollback,
    CommandType.FETCH_PRODUCE_FEEDBACK: fetch_produce_feedback,
}
