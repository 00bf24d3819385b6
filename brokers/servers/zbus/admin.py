"""``admin`` (zbus.md §11.2, §13.3): index page, ``jquery``, ``data``, ``create_mq``, and the
seed-000 ``track_sub`` form. The admin token, when configured, guards every sub-command.

The ORM is imported only by ``create_mq`` (and Django's settings are read only by the index
page), so the server runs in a bare asyncio process too, e.g. the benchmark.
"""

from __future__ import annotations

import orjson

from brokers.protocols.zbus import (
    CreateMqError,
    Message,
    MqMode,
    SubCommand,
    is_valid_mq_name,
    parse_create_mq,
)
from brokers.protocols.zbus.replies import ADMIN_FORBIDDEN, bad_format, sub_cmd_not_found
from brokers.servers.zbus import track
from brokers.servers.zbus.access import admin_allowed
from brokers.servers.zbus.connection import Connection
from brokers.servers.zbus.context import ServerContext
from brokers.servers.zbus.data import broker_data, mq_names
from brokers.servers.zbus.index import render_index, select, wants_page
from brokers.servers.zbus.mqs import lookup
from brokers.servers.zbus.replies import Refuse, reply
from brokers.servers.zbus.temp import open_temp

HTML = {"content-type": "text/html; charset=utf-8"}
JSON = {"content-type": "application/json"}
JS = {"content-type": "application/javascript"}


async def admin(ctx: ServerContext, conn: Connection, msg: Message) -> None:
    """Route by ``sub_cmd`` (alias ``method``) after the admin token check."""
    if not admin_allowed(ctx.config.admin_token, msg.token):
        raise Refuse(403, ADMIN_FORBIDDEN, always=True)
    sub = msg.sub_cmd
    if sub in ("", SubCommand.INDEX):
        paging = select(mq_names(ctx), msg.headers)
        data = await broker_data(ctx, paging.names)
        reply(conn, msg, 200, render_index(data, msg.token, paging), HTML)
    elif sub == SubCommand.JQUERY:
        reply(conn, msg, 200, b"", JS)
    elif sub == SubCommand.DATA:
        names = select(mq_names(ctx), msg.headers).names if wants_page(msg.headers) else None
        reply(conn, msg, 200, orjson.dumps(await broker_data(ctx, names)), JSON)
    elif sub == SubCommand.CREATE_MQ:
        await create_mq(ctx, conn, msg)
    elif sub == SubCommand.TRACK_SUB:
        await track.track_sub(ctx, conn, msg)
    elif sub == SubCommand.TRACK_REPORT:
        return  # this broker is not a tracker; a report expects no reply
    else:
        raise Refuse(404, sub_cmd_not_found(sub), always=True)


def _mismatch(existing: int, wanted: int) -> str | None:
    if wanted & MqMode.PUBSUB and not existing & MqMode.PUBSUB:
        return "Pubsub, type not matched"
    if wanted & MqMode.MQ and not wanted & MqMode.PUBSUB and existing & MqMode.PUBSUB:
        return "MsgQueue, type not matched"
    return None


async def create_mq(ctx: ServerContext, conn: Connection, msg: Message) -> None:
    """Create a catalog MQ (or a connection-scoped Temp MQ); 200 if it exists compatibly."""
    try:
        params = parse_create_mq(msg.body)
    except CreateMqError as exc:
        raise Refuse(400, exc.reply_body, always=True) from None
    mode = int(params.mode) & 7
    existing = lookup(ctx, params.name)
    if existing is not None:
        problem = _mismatch(existing.mode, mode)
        if problem:
            raise Refuse(400, bad_format(problem), always=True)
        reply(conn, msg, 200, str(ctx.engine.now_ms()))
        return
    if not is_valid_mq_name(params.name):
        raise Refuse(400, bad_format("mqName invalid"), always=True)
    creator = msg.remote_addr or conn.remote_addr
    if mode & MqMode.TEMP:
        await open_temp(ctx, params.name, mode, conn, params.access_token, fifo=True).registered()
    else:
        from brokers.servers.zbus.catalog_ops import create_topic  # needs Django's ORM

        outcome = await create_topic(params.name, mode, params.access_token, creator, ctx.broker_id)
        if outcome.invalid:
            raise Refuse(400, bad_format("mqName invalid"), always=True)
        await ctx.watcher.refresh()
        if not outcome.created:
            problem = _mismatch(outcome.mode, mode)
            if problem:
                raise Refuse(400, bad_format(problem), always=True)
    track.push_soon(ctx)
    reply(conn, msg, 200, str(ctx.engine.now_ms()))
