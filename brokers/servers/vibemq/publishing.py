"""``publish`` (vibemq.md §6), one frame or a run of them.

A connection's consecutive ``publish`` frames that are already read (up to ``MAX_RUN``)
are checked one by one in order (frame rate, queue); those bound for one queue are stored
with one engine call (:meth:`Engine.append_many`), in their order, and the calls of
different queues go out together: one Redis round trip for the run however many queues it
names (stored one queue after the other, a connection publishing round a fleet of 5,000
queues managed 800 publishes a second). The engine call is also the gate — producer
policy, blacklist, rate limit — and applies the queue's bound and overflow. The replies —
``publishAck`` only once its message is stored, or the frame's error — go out in the
frames' order (§4). A queue to auto-create first stores, and acknowledges, the run
before it.
"""

from __future__ import annotations

import asyncio
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
    """Checked publishes waiting to be stored: one engine call per queue (a queue's
    frames in their order), the queues' calls at once — a connection publishing to many
    queues pays one Redis round trip for the run, not one per queue change — and the
    replies in the frames' order."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.frames: list[Publish] = []
        self.refused: dict[int, tuple[ErrorCode, str]] = {}
        """Frame position → the error it gets without being stored (its frame rate)."""
        self.queues: dict[str, tuple[list[int], list[Message]]] = {}
        """Queue → the positions of its frames and their messages."""

    def __len__(self) -> int:
        return len(self.frames)

    def add(self, frame: Publish, message: Message) -> None:
        positions, messages = self.queues.setdefault(frame.queue, ([], []))
        positions.append(len(self.frames))
        messages.append(message)
        self.frames.append(frame)

    def refuse(self, frame: Publish, code: ErrorCode, text: str) -> None:
        """``frame`` gets ``code`` in its turn, after the replies of those before it."""
        self.refused[len(self.frames)] = (code, text)
        self.frames.append(frame)

    async def flush(self) -> None:
        """Store the run and reply to each frame, in order."""
        if not self.frames:
            return
        frames, refused, queues = self.frames, self.refused, self.queues
        self.frames, self.refused, self.queues = [], {}, {}
        results: list[AppendResult | EngineError | None] = [None] * len(frames)
        session = self.session
        if len(queues) == 1:
            [(queue, (positions, messages))] = queues.items()
            await _store(session, queue, positions, messages, results)
        elif queues:
            await asyncio.gather(*(_store(session, q, *run, results) for q, run in queues.items()))
        ctx = session.ctx
        for i, frame in enumerate(frames):
            result = results[i]
            if isinstance(result, EngineError):
                code, text = _store_error(result)
                session.error(code, text, frame.id)
            elif result is None:
                code, text = refused[i]
                session.error(code, text, frame.id)
            else:
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
            run.refuse(frame, ErrorCode.RATE_LIMITED, "frame rate exceeded")
            continue
        if len(run) >= MAX_RUN:
            await run.flush()
        if session.ctx.queue_settings(frame.queue) is None:
            await run.flush()  # auto-create (or its error) after the replies before it
            if not await queue_admin.ensure(session, frame.queue, frame.id):
                continue
        run.add(frame, to_message(frame))
    await run.flush()


async def _store(
    session: Session,
    queue: str,
    positions: list[int],
    messages: list[Message],
    results: list[AppendResult | EngineError | None],
) -> None:
    """Store one queue's messages of a run; each frame's result at its position. A
    function of the module, not a closure of ``flush``: compiled, a closure defined in a
    coroutine holds the coroutine's scope in a reference cycle, garbage for the
    collector at every run (see brokers/compiled.py)."""
    try:
        got: Sequence[AppendResult | EngineError] = await session.ctx.engine.append_many(
            queue,
            session.acting_app(queue),
            messages,
            qos=QoS.PERSISTED,
            client_address=session.address or None,
        )
    except EngineError as exc:  # refused, or the store failed: nothing was stored
        if not isinstance(exc, AccessDenied | RateLimited | TopicNotFound):
            log.warning("VibeMQ publish to %s failed: %s", queue, exc)
        got = [exc] * len(positions)
    for i, result in zip(positions, got, strict=True):
        results[i] = result
