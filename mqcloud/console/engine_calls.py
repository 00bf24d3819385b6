"""Synchronous engine reads and actions for console views (through ``engine_session``).

Every call opens a short engine session; engine and store errors become
:class:`EngineUnavailable`, which pages show as a notice instead of failing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeVar

import redis

from brokers.engine import (
    ClientLatency,
    ClientRow,
    Delivery,
    Engine,
    EngineError,
    GroupLag,
    InventoryRow,
    MinuteTraffic,
    PartitionProgress,
    RetryRecord,
    TopicRate,
)
from mqcloud.console.message_properties import message_properties, producing_protocol
from mqcloud.engine_access import run_in_session
from pipeline import ids
from pipeline.ids import MessageId

T = TypeVar("T")
PREVIEW = 160  # characters of a body shown in lists
SCAN_LIMIT = 5000  # records a businessId or time scan reads per partition at most


class EngineUnavailable(Exception):
    """The engine could not answer (store down, catalog not published yet, bad request)."""


class PastTheEnd(Exception):
    """A read starts beyond a partition's last index: the store answered, nothing is there."""


def run(fn: Callable[[Engine], Awaitable[T]]) -> T:
    """Run ``fn(engine)`` in a short engine session."""
    try:
        return run_in_session(fn)
    except EngineError as exc:
        raise EngineUnavailable(f"{type(exc).__name__}: {exc}") from exc
    except (redis.RedisError, OSError) as exc:
        raise EngineUnavailable(f"The message store did not answer: {exc}") from exc


def fmt_ms(ms: int) -> str:
    """A millisecond epoch time as ``YYYY-MM-DD HH:MM:SS.mmm`` UTC ('' for 0)."""
    if ms <= 0:
        return ""
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


@dataclass(frozen=True)
class MessageRow:
    """One stored record as the message browser shows it."""

    partition: int
    index: int
    count: int
    business_id: str
    app: str
    client_address: str
    priority: int
    send_time: str
    store_time: str
    store_time_ms: int
    size: int
    body_preview: str
    body_is_text: bool
    protocol: str = ""
    """The protocol that produced it (``message_properties.PROTOCOLS``)."""
    properties: dict[str, str] = field(default_factory=dict)
    """Every property it carries: JMQ4 attributes, zbus and VibeMQ headers, HTTP-MQ keys."""
    item_ids: tuple[str, ...] = ()


def preview(body: bytes, limit: int = PREVIEW) -> tuple[str, bool]:
    """Text of a body (UTF-8) or its hex when it is binary, cut to ``limit`` characters."""
    try:
        text, is_text = body.decode("utf-8"), True
    except UnicodeDecodeError:
        text, is_text = body.hex(" "), False
    return (text if len(text) <= limit else text[:limit] + "…"), is_text


def to_row(delivery: Delivery) -> MessageRow:
    msg = delivery.message
    item_ids: tuple[str, ...] = ()
    if msg.is_batch:
        try:
            item_ids = tuple(i.business_id for i in msg.items() if i.business_id)
        except EngineError:
            item_ids = ()
    body, is_text = preview(msg.body)
    return MessageRow(
        partition=delivery.partition,
        index=delivery.index,
        count=delivery.count,
        business_id=msg.business_id,
        app=msg.app,
        client_address=msg.client_address,
        priority=msg.priority,
        send_time=fmt_ms(msg.send_time_ms),
        store_time=fmt_ms(msg.store_time_ms),
        store_time_ms=msg.store_time_ms,
        size=msg.size,
        body_preview=body,
        body_is_text=is_text,
        protocol=producing_protocol(msg),
        properties=message_properties(msg),
        item_ids=item_ids,
    )


def traffic(dimension: str, name: str, start_ms: int, end_ms: int) -> list[MinuteTraffic]:
    """Per-minute produce/consume counters of a topic, app or broker."""
    return run(lambda e: e.traffic(dimension, name, start_ms, end_ms))


def clients_of(apps: Sequence[str]) -> dict[str, list[ClientRow]]:
    """Each app's client hosts by kind of client (:meth:`Engine.clients_of`)."""
    return run(lambda engine: engine.clients_of(list(apps)))


def client_inventory() -> list[InventoryRow]:
    """Every kind of client on the platform (:meth:`Engine.client_inventory`)."""
    return run(lambda engine: engine.client_inventory())


def bounds(topic: str, partitions: int) -> list[tuple[int, int, int]]:
    """(partition, min index, max index) of every partition of ``topic``."""

    async def call(engine: Engine) -> list[tuple[int, int, int]]:
        return [(p, *(await engine.bounds(topic, p))) for p in range(partitions)]

    return run(call)


def progress(topic: str, app: str, client_id: str | None = None) -> list[PartitionProgress]:
    return run(lambda e: e.progress(topic, app, client_id=client_id))


def broadcast_clients(topic: str, app: str) -> list[str]:
    return run(lambda e: e.broadcast_clients(topic, app, active_within_ms=None))


def members(topic: str, app: str) -> list[str]:
    """The members of a fan-out queue's group (its subscribers with progress)."""
    return run(lambda e: e.members(topic, app))


def client_lags(topic: str, app: str) -> list[tuple[str | None, GroupLag]]:
    """The lag of each progress of one consumer, furthest behind first: a broadcast
    consumer's active clients (all of them when none is), a fan-out queue's members,
    else the group's own (client None); see ``Engine.client_lags``."""

    async def call(engine: Engine) -> list[tuple[str | None, GroupLag]]:
        found = (await engine.client_lags([(topic, app)])).get((topic, app), {})
        return sorted(found.items(), key=lambda item: (-item[1].lag, item[0] or ""))

    return run(call)


@dataclass(frozen=True)
class Refusals:
    """What the engine refused one app on one topic in the last hour."""

    topic: str
    refused: int
    by_reason: dict[str, int]


REFUSAL_WINDOW_MINUTES = 60


def refusals(app: str) -> list[Refusals]:
    """``app``'s refused messages per topic in the last hour, most refused first."""

    async def call(engine: Engine) -> list[Refusals]:
        found = await engine.produce_refusals(minutes=REFUSAL_WINDOW_MINUTES, app=app)
        rows = [Refusals(t, sum(k.values()), k) for (t, _), k in found.items()]
        return sorted(rows, key=lambda r: (-r.refused, r.topic))

    return run(call)


@dataclass(frozen=True)
class ProduceLatencyRow:
    """One client host's appends to one topic of an app over a window."""

    topic: str
    client: str
    latency: ClientLatency


def produce_latency(app: str, topics: Sequence[str], hours: int) -> list[ProduceLatencyRow]:
    """The producer statistics of ``app`` on ``topics`` over the last ``hours`` whole
    hours and the current one, per client host: slowest p99 first, then by topic and host
    (clients of the window only)."""

    async def call(engine: Engine) -> list[ProduceLatencyRow]:
        found = await engine.produce_latency([(t, app) for t in topics], hours)
        rows = [ProduceLatencyRow(t, host, v) for (t, _, host), v in found.items()]
        return sorted(rows, key=_slowest_first)

    return run(call)


def _slowest_first(row: ProduceLatencyRow) -> tuple[int, int, str, str]:
    p99 = row.latency.percentile(0.99)
    slower = 10**9 if p99 is None and row.latency.messages else (p99 or 0)
    return (-slower, -row.latency.failed, row.topic, row.client)


def read_range(topic: str, partition: int, start: int, count: int) -> list[MessageRow]:
    """Up to ``count`` records of one partition from ``start``; :class:`PastTheEnd` when
    ``start`` lies beyond the next index to be written."""

    async def call(engine: Engine) -> list[MessageRow]:
        lo, hi = await engine.bounds(topic, partition)
        if start > hi:
            raise PastTheEnd(f"Partition {partition} holds indexes {lo}–{hi - 1} only.")
        first = max(start, lo)
        rows = [to_row(d) for d in await engine.read(topic, partition, first, count)]
        out, taken = [], 0
        for row in rows:
            if taken >= count:
                break
            out.append(row)
            taken += row.count
        return out

    return run(call)


@dataclass(frozen=True)
class Scan:
    """Result of a scan over a time window: matches and whether the scan was cut short."""

    rows: list[MessageRow]
    truncated: bool


def scan(
    topic: str,
    partitions: Sequence[int],
    from_ms: int,
    to_ms: int,
    *,
    message_id: MessageId | None = None,
    limit: int = 100,
) -> Scan:
    """Records stored in ``[from_ms, to_ms]`` (those ``message_id`` names when given: any
    id a client saw, see pipeline.ids)."""

    async def call(engine: Engine) -> Scan:
        found: list[MessageRow] = []
        truncated = False
        # where the span starts and ends in every partition: one round trip, so that a
        # topic of a thousand partitions costs reads only where the span holds messages
        spans = await engine.indexes_at_times(topic, partitions, (from_ms, to_ms + 1))
        for p, (index, end) in zip(partitions, spans, strict=True):
            scanned = 0
            while index < end and len(found) < limit:
                if scanned >= SCAN_LIMIT:
                    truncated = True
                    break
                batch = await engine.read(topic, p, index, min(64, end - index))
                if not batch:
                    break
                stop = False
                for d in batch:
                    row = to_row(d)
                    scanned += 1
                    index = d.index + d.count
                    if row.store_time_ms > to_ms:
                        stop = True
                        break
                    if message_id is None or ids.matches(
                        message_id,
                        row.partition,
                        range(row.index, row.index + row.count),
                        (row.business_id, *row.item_ids),
                        row.properties,
                    ):
                        found.append(row)
                        if len(found) >= limit:
                            truncated = True
                            break
                if stop:
                    break
        found.sort(key=lambda r: (r.store_time_ms, r.partition, r.index))
        return Scan(found, truncated)

    return run(call)


def id_partitions(partitions: int, message_id: MessageId) -> list[int]:
    """Where a message with that id can be: the partition a position names, else any (a
    sequential topic hashes businessIds, but a VibeMQ or zbus id is not one)."""
    named = message_id.partitions
    return [p for p in range(partitions) if named is None or p in named]


@dataclass(frozen=True)
class RetryRow:
    """A retry or dead-letter entry as the console lists it."""

    id: int
    partition: int
    index: int
    attempts: int
    created: str
    due: str
    reason: str
    business_id: str
    body_preview: str


def _retry_row(r: RetryRecord) -> RetryRow:
    try:
        msg = r.message
        bid, (body, _) = msg.business_id, preview(msg.body)
    except EngineError:
        bid, body = "", "(undecodable record)"
    return RetryRow(
        r.id, r.partition, r.index, r.attempts, fmt_ms(r.created_ms), fmt_ms(r.due_ms),
        r.reason, bid, body,
    )  # fmt: skip


def retry_lists(
    topic: str,
    app: str,
    which: str,
    offset: int = 0,
    limit: int = 50,
    client_id: str | None = None,
) -> tuple[list[RetryRow], int, int]:
    """(rows of the 'retry' or 'dlq' list, retry count, dead-letter count); the retries
    of a broadcast consumer's ``client_id``, when given."""

    async def call(engine: Engine) -> tuple[list[RetryRow], int, int]:
        if which == "dlq":
            found = await engine.dead_letters(topic, app, offset, limit)
        else:
            found = await engine.retries(topic, app, offset, limit, client_id=client_id)
        retries, dead = await engine.retry_counts(topic, app, client_id=client_id)
        return [_retry_row(r) for r in found], retries, dead

    return run(call)


def retry_counts(topic: str, app: str, client_id: str | None = None) -> tuple[int, int]:
    return run(lambda e: e.retry_counts(topic, app, client_id=client_id))


def consume_failures(topic: str, app: str, minutes: int = 60) -> tuple[int, int]:
    """Messages the consumer group failed in the last ``minutes`` (every client's), and
    how many of them its topic's send-back limit held back (delivered again at once
    instead of waiting in the retry store)."""

    async def call(engine: Engine) -> tuple[int, int]:
        group = [(topic, app)]
        failed, held = await asyncio.gather(  # two reads, one wait
            engine.consume_failures(group, minutes=minutes),
            engine.held_back_send_backs(group, minutes=minutes),
        )
        return failed.get((topic, app), 0), held.get((topic, app), 0)

    return run(call)


def retry_action(
    topic: str, app: str, action: str, ids: Sequence[int], client_id: str | None = None
) -> int:
    """Direct actions on the retry store: resend/skip retries (a broadcast consumer's
    ``client_id``'s own, when given), skip/purge dead letters."""
    calls: dict[str, Callable[[Engine], Awaitable[Any]]] = {
        "retry-resend": lambda e: e.resend_retries(topic, app, ids, client_id=client_id),
        "retry-skip": lambda e: e.skip_retries(topic, app, ids, client_id=client_id),
        "dlq-skip": lambda e: e.skip_dead_letters(topic, app, ids),
        "dlq-purge": lambda e: e.purge_dead_letters(topic, app),
    }
    if action not in calls:
        raise ValueError(f"unknown action {action!r}")
    return run(calls[action])


def group_lags(groups: Sequence[tuple[str, str]]) -> dict[tuple[str, str], GroupLag]:
    """Lag of many consumer groups ``(topic, app)`` in two round trips."""
    return run(lambda e: e.group_lags(groups))


def produce_rates(topics: Sequence[str], minutes: int) -> dict[str, TopicRate]:
    """Messages produced to each topic in the last ``minutes`` whole minutes."""
    return run(lambda e: e.produce_rates(topics, minutes=minutes))
