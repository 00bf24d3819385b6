"""``track_sub`` / ``track_pub`` (zbus.md §11.4), the engine's reports in the tracker's place.

While tracking is in use, every zbus server puts its ``data`` JSON on the engine's report
board :data:`BOARD` every ``REPORT_INTERVAL`` seconds (the ``track_report`` of 5.x; the
report stops counting when the broker stops reporting, which drops it as the tracker's probe
would). A ``track_sub`` is answered with the TrackTable of every broker whose report is
fresh, echoing the request's headers, and the connection then gets a ``track_pub`` push
every ``track_push_interval`` seconds and after every MQ creation.

Tracking is in use while some server has ``track_sub`` subscribers: each such server puts
itself on :data:`DEMAND_BOARD`, and the others report only while that board has a fresh
entry. A report lists every MQ with its counts — Redis work in proportion to the catalog
(at 10,000 topics about 35,000 commands a second and 30% of a core per idle broker, and a
2.6 MB report) — so a fleet whose clients do not track (zbus 5.x: tracking is off unless
configured, §11.4) pays nothing for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import orjson

from brokers.protocols.zbus import Command, Header, Message, make_reply, make_request
from brokers.servers.zbus.connection import Connection
from brokers.servers.zbus.context import ServerContext
from brokers.servers.zbus.data import broker_data, track_table

log = logging.getLogger("mqcloud.zbus")
REPORT_INTERVAL = 3.0
REPORT_VALID_S = 10.0
"""A broker's report counts this long after it was made."""
BOARD = "zbus-track"
"""The engine report board of the zbus servers' ``data`` JSON, by broker address."""
DEMAND_BOARD = "zbus-track-demand"
"""The servers that have ``track_sub`` subscribers, by address: while any entry is fresh,
every zbus server reports."""
DEMAND_VALID_S = 30.0


def _addresses(ctx: ServerContext) -> list[str]:
    return sorted(
        {f"{b.host}:{b.zbus_port}" for b in ctx.snapshot.brokers.values() if b.alive}
        | {ctx.address}
    )


async def report(ctx: ServerContext) -> dict[str, Any]:
    """Put this broker's data on the report board and return it."""
    data = await broker_data(ctx)
    await ctx.engine.publish_report(BOARD, ctx.address, data, valid_for_s=REPORT_VALID_S)
    return data


async def cluster_table(ctx: ServerContext) -> dict[str, Any]:
    """The TrackTable: this broker's fresh data plus every other broker's last report."""
    own = await report(ctx)
    others = [a for a in _addresses(ctx) if a != ctx.address]
    reports: dict[str, Any] = {ctx.address: own}
    if others:
        reports.update(await ctx.engine.read_reports(BOARD, others))
    return track_table(reports)


async def announce_demand(ctx: ServerContext) -> None:
    """Tell every zbus server that this one's clients track (they start reporting)."""
    await ctx.engine.publish_report(DEMAND_BOARD, ctx.address, {}, valid_for_s=DEMAND_VALID_S)


async def tracking_wanted(ctx: ServerContext) -> bool:
    """Whether this server or another has ``track_sub`` subscribers."""
    return bool(ctx.track_subscribers) or bool(await ctx.engine.read_reports(DEMAND_BOARD))


async def track_sub(ctx: ServerContext, conn: Connection, msg: Message) -> None:
    """Reply with the table (request headers echoed) and subscribe the connection; the
    other servers start reporting within ``REPORT_INTERVAL``, and the next ``track_pub``
    carries them."""
    await announce_demand(ctx)
    table = await cluster_table(ctx)
    headers = {k: v for k, v in msg.headers.items() if k not in (Header.MSGID, Header.MQ_REPLY)}
    conn.send(
        make_reply(
            200,
            orjson.dumps(table),
            msgid=msg.msgid,
            mq_reply=conn.session_id,
            headers=headers,
        ),
        msg.aliases,
    )
    if conn not in ctx.track_subscribers:
        ctx.track_subscribers[conn] = msg.aliases
        conn.on_close(lambda: ctx.track_subscribers.pop(conn, None))


async def push(ctx: ServerContext) -> None:
    """Send ``track_pub`` with the current table to every subscriber."""
    if not ctx.track_subscribers:
        return
    table = orjson.dumps(await cluster_table(ctx))
    message = make_request({Header.CMD: Command.TRACK_PUB.value}, table)
    for conn, aliases in list(ctx.track_subscribers.items()):
        conn.send(message, aliases)


async def run_reporter(ctx: ServerContext) -> None:
    """While tracking is in use, report every few seconds and push to subscribers on their
    interval."""
    loop = asyncio.get_running_loop()
    next_push = loop.time() + ctx.config.track_push_interval
    while True:
        try:
            if ctx.track_subscribers:
                await announce_demand(ctx)
            if await tracking_wanted(ctx):
                await report(ctx)
            if loop.time() >= next_push:
                next_push = loop.time() + ctx.config.track_push_interval
                await push(ctx)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.warning("zbus track report failed", exc_info=True)
        await asyncio.sleep(min(REPORT_INTERVAL, ctx.config.track_push_interval))


def push_soon(ctx: ServerContext) -> None:
    """Push after an MQ creation (§11.4), in the background."""
    if ctx.track_subscribers:
        with contextlib.suppress(RuntimeError):
            ctx.spawn(push(ctx), "zbus-track-push")
