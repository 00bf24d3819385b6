"""The admin ``data`` JSON and the track table (zbus.md §11.2, §11.4, §13.5).

Numbers are real: backlog and in-flight come from the engine's group counts (shared by
all brokers and protocols: the MQ's slowest consumer group, or everything stored while it
has none); consumers are the connections of this broker that consumed within
``consumer_window_s`` or are parked; pub/sub MQs report subscribers and buffered messages.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Sequence
from typing import Any

from brokers.engine import EngineError, GroupStats
from brokers.protocols.zbus import MqMode
from brokers.servers.zbus.connection import Connection
from brokers.servers.zbus.context import ServerContext
from brokers.servers.zbus.mqs import MqRef, lookup

NO_CONSUMER_LOAD = sys.float_info.max


def _consumers(ctx: ServerContext, mq: MqRef) -> list[dict[str, Any]]:
    now = Connection.now()
    recent = ctx.activity.get(mq.code, {})
    parked: dict[Connection, bool] = {}
    topics: dict[Connection, list[str]] = {}
    if mq.temp is not None:
        for waiter in mq.temp.waiters.values():
            parked[waiter.conn] = True
    elif mq.pubsub:
        runtime = ctx.pubsubs.get(mq.code)
        for conn, sub in (runtime.subscribers if runtime else {}).items():
            parked[conn] = sub.window != 0
            topics[conn] = sorted(sub.topics)
    else:
        runtime = ctx.queues.get(mq.code)
        for session in runtime.line if runtime else ():
            parked[session.conn] = session.active
    out = []
    for conn in set(recent) | set(parked):
        if conn.closed:
            recent.pop(conn, None)
            continue
        waiting = parked.get(conn, False)
        if not waiting and now - recent.get(conn, -1e18) > ctx.config.consumer_window_s:
            continue
        info: dict[str, Any] = {
            "remoteAddr": conn.remote_addr,
            "status": "parked" if waiting else "idle",
        }
        if mq.pubsub:
            info["topics"] = topics.get(conn, [])
        out.append(info)
    return sorted(out, key=lambda i: i["remoteAddr"])


async def _counts(ctx: ServerContext, mq: MqRef) -> tuple[int, int, dict[str, int]]:
    """(unconsumed, in flight, extra fields) of one MQ."""
    if mq.temp is not None:
        return mq.temp.unconsumed(), 0, {}
    if mq.pubsub:
        runtime = ctx.pubsubs.get(mq.code)
        buffered = await runtime.buffered() if runtime else 0
        subscribers = len(runtime.subscribers) if runtime else 0
        return buffered, 0, {"subscriberCount": subscribers, "bufferedMsgCount": buffered}
    try:
        stats: GroupStats = await ctx.engine.queue_stats(mq.code)
    except EngineError:
        return 0, 0, {}
    return stats.message_count, stats.in_flight, {}


async def mq_info(ctx: ServerContext, mq: MqRef, broker: str) -> dict[str, Any]:
    """The MqInfo of one MQ."""
    unconsumed, in_flight, extra = await _counts(ctx, mq)
    consumers = _consumers(ctx, mq)
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
    infos = await asyncio.gather(*(mq_info(ctx, r, ctx.address) for r in refs))
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
