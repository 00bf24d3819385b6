"""The admin ``data`` JSON and the track table (zbus.md §11.2, §11.4, §13.5).

Numbers are real: backlog and in-flight come from the engine's group counts (shared by
all brokers and protocols: the MQ's slowest consumer group, or everything stored while it
has none); consumers are the connections of this broker — of all its processes, asked
through :mod:`.census` — that consumed within ``consumer_window_s`` or are parked; pub/sub
MQs report their subscribers and what waits in their buffers (against the MQ's end when
asked: a subscriber with no window left still gathers a buffer).
"""

from __future__ import annotations

import asyncio
import sys
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from brokers.engine import EngineError, GroupStats
from brokers.protocols.zbus import MqMode
from brokers.servers.zbus.census import Share, local_share
from brokers.servers.zbus.context import ServerContext
from brokers.servers.zbus.mqs import MqRef, lookup
from brokers.servers.zbus.pubsub import buffered_total

NO_CONSUMER_LOAD = sys.float_info.max


def _consumer_info(consumer: tuple[str, str, list[str]], pubsub: bool) -> dict[str, Any]:
    remote, status, topics = consumer
    info: dict[str, Any] = {"remoteAddr": remote, "status": status}
    if pubsub:
        info["topics"] = topics
    return info


async def _counts(
    ctx: ServerContext, mq: MqRef, shares: list[Share]
) -> tuple[int, int, dict[str, int]]:
    """(unconsumed, in flight, extra fields) of one MQ whose consumers are ``shares``."""
    if mq.temp is not None:
        return mq.temp.unconsumed(), 0, {}
    if mq.pubsub:
        cursors: Counter[int] = Counter()
        for share in shares:
            cursors.update(share.cursors)
        subscribers, buffered = sum(cursors.values()), 0
        if subscribers:
            try:  # the end now: a pump reads it only while a subscriber has window left
                start, end = await ctx.engine.bounds(mq.code, 0)
            except EngineError:
                start = end = 0
            buffered = buffered_total(cursors, start, end, ctx.config.pubsub_buffer)
        return buffered, 0, {"subscriberCount": subscribers, "bufferedMsgCount": buffered}
    try:
        stats: GroupStats = await ctx.engine.queue_stats(mq.code)
    except EngineError:
        return 0, 0, {}
    return stats.message_count, stats.in_flight, {}


async def mq_info(
    ctx: ServerContext, mq: MqRef, broker: str, others: Sequence[Mapping[str, Share]] = ()
) -> dict[str, Any]:
    """The MqInfo of one MQ; ``others``: the other processes' shares of the broker's MQs
    (:mod:`.census`)."""
    shares = [local_share(ctx, mq.code, mq.pubsub, mq.temp)]
    if mq.temp is None:
        shares += [other[mq.code] for other in others if mq.code in other]
    unconsumed, in_flight, extra = await _counts(ctx, mq, shares)
    consumers = sorted(
        (_consumer_info(c, mq.pubsub) for share in shares for c in share.consumers),
        key=lambda i: i["remoteAddr"],
    )
    if mq.temp is not None:
        creator, created = mq.temp.owner.remote_addr, mq.temp.created_ms
    else:
        assert mq.topic is not None
        creator, created = mq.topic.creator, mq.topic.created_ms
    count = len(consumers)
    return {
        "broker": broker,
        "name": mq.name,
        "mode": mq.mode,
        "creator": creator,
        "createdTime": created,
        "unconsumedMsgCount": unconsumed,
        "inFlightMsgCount": in_flight,
        "consumerCount": count,
        "loadFactor": (unconsumed + 0.000001) / count if count else NO_CONSUMER_LOAD,
        "consumerInfoList": consumers,
        **extra,
    }


def mq_names(ctx: ServerContext) -> list[str]:
    """Every MQ this broker serves, as zbus clients call them: catalog topics (by their
    zbus name where they have one, else their code), then its Temp MQs."""
    topics = ctx.snapshot.topics.values()
    return sorted(t.zbus_name or t.code for t in topics) + sorted(ctx.temps)


async def broker_data(ctx: ServerContext, names: Sequence[str] | None = None) -> dict[str, Any]:
    """The ``data`` JSON of this broker: every MQ, or those of ``names`` only."""
    wanted = mq_names(ctx) if names is None else names
    refs = [r for r in (lookup(ctx, n) for n in wanted) if r is not None]
    others: list[dict[str, Share]] = []
    if ctx.census is not None:
        codes = None if names is None else [r.code for r in refs if r.temp is None]
        others = await ctx.census.others(codes)
    infos = await asyncio.gather(*(mq_info(ctx, r, ctx.address, others) for r in refs))
    return {
        "broker": ctx.address,
        "lastUpdatedTime": ctx.engine.now_ms(),
        "mqTable": {info["name"]: info for info in infos},
    }


def track_table(reports: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The TrackTable of §11.4 from each broker's ``data`` JSON."""
    mq_table: dict[str, list[dict[str, Any]]] = {}
    for data in reports.values():
        for name, info in data.get("mqTable", {}).items():
            mq_table.setdefault(name, []).append(info)
    for infos in mq_table.values():
        infos.sort(key=lambda i: i.get("loadFactor", 0), reverse=True)
    return {"brokerTable": reports, "mqTable": mq_table}


def mode_label(mode: int) -> str:
    """``queue``/``pub/sub`` × ``permanent``/``temporary`` (§11.3)."""
    kind = "pub/sub" if mode & MqMode.PUBSUB else "queue"
    life = "temporary" if mode & MqMode.TEMP else "permanent"
    return f"{kind}, {life}"
