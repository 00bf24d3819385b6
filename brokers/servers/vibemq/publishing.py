"""``publish`` (vibemq.md §6), one frame or a run of them.

A connection's consecutive ``publish`` frames that are already read are checked one by
one in order (frame rate, queue) and those bound for the same queue are stored with one
engine call (:meth:`Engine.append_many`, one Redis round trip), which is also the gate —
producer policy, blacklist, rate limit — and applies the queue's bound and overflow. The replies — ``publishAck`` only once its
message is stored, or the frame's error — go out in the frames' order (§4). An error reply first stores, and acknowledges, the run
before it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from brokers.engine import (
    AccessDenied,
    AppendResult,
    EngineError,
    InvalidMessage,
    Message,
    MessageTooLarge,
    QoS,
    QueueFull,
    RateLimited,
    TopicNotFound,
)
from brokers.protocols.vibemq import ErrorCode, Publish, publish_ack
from brokers.servers.vibemq import queue_admin
from brokers.servers.vibemq.messages import to_message
from brokers.servers.vibemq.session import Session

log = logging.getLogger("mqcloud.vibemq")
MAX_RUN = 256


def _store_error(exc: EngineError) -> tuple[ErrorCode, str]:
    """The protocol error of a message the engine did not store."""
    if isinstance(exc, QueueFull):
        return ErrorCode.QUEUE_FULL, str(exc)
    if isinstance(exc, TopicNotFound):
        return ErrorCode.QUEUE_NOT_FOUND, str(exc)
    if isinstance(exc, MessageTooLarge | InvalidMessage):
        return ErrorCode.INVALID_MESSAGE, str(exc)
    if isinstance(exc, AccessDenied):
        return ErrorCode.FORBIDDEN, str(exc)
    if isinstance(exc, RateLimited):
        return ErrorCode.RATE_LIMITED, "publish rate exceeded"
    return ErrorCode.SERVER_ERROR, "message not stored"


class PublishRun:
    """Checked publishes of one queue waiting to be stored together."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.queue: str | None = None
        self.frames: list[Publish] = []
        self.messages: list[Message] = []

    def add(self, frame: Publish, message: Message) -> None:
        self.queue = frame.queue
        self.frames.append(frame)
        self.messages.append(message)

    async def flush(self) -> None:
        """Store the run and reply to each frame, in order."""
        if not self.frames:
            return
        session, ctx = self.session, self.session.ctx
        frames, messages, queue = self.frames, self.messages, self.queue
        self.frames, self.messages, self.queue = [], [], None
        assert queue is not None
        try:
            results: Sequence[AppendResult | EngineError] = await ctx.engine.append_many(
                queue,
                session.acting_app(queue),
                messages,
                qos=QoS.PERSISTED,
                client_address=session.address or None,
            )
        except EngineError as exc:  # refused, or the store failed: nothing was stored
            if not isinstance(exc, AccessDenied | RateLimited | TopicNotFound):
                log.warning("VibeMQ publish to %s failed: %s", queue, exc)
            results = [exc] * len(frames)
        for frame, result in zip(frames, results, strict=True):
            if isinstance(result, EngineError):
                code, text = _store_error(result)
                session.error(code, text, frame.id)
                continue
            ctx.counters["published"] += 1
            session.send(
                publish_ack(frame, dropped=result.dropped, dead_lettered=result.dead_lettered)
            )


async def publish(session: Session, frames: Sequence[Publish], *, admitted: bool = False) -> None:
    """Handle ``frames`` (consecutive publishes of one connection) in order; ``admitted``:
    the frame rate limit was already applied."""
    run = PublishRun(session)
    for frame in frames:
        if not admitted and not session.rate_allowed():
            await run.flush()
            session.error(ErrorCode.RATE_LIMITED, "frame rate exceeded", frame.id)
            continue
        if run.queue not in (None, frame.queue) or len(run.frames) >= MAX_RUN:
            await run.flush()
        if session.ctx.queue_settings(frame.queue) is None:
            await run.flush()  # auto-create (or its error) after the replies before it
            if not await queue_admin.ensure(session, frame.queue, frame.id):
                continue
        run.add(frame, to_message(frame))
    await run.flush()
