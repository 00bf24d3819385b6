"""The §5 headers the broker stamps on every inbound message: ``remote-addr``,
``broker`` and, when absent, ``mq_reply`` (the connection's session id)."""

from __future__ import annotations

from brokers.protocols.zbus import Header, Message
from brokers.servers.zbus.connection import Connection
from brokers.servers.zbus.context import ServerContext


def stamp_updates(ctx: ServerContext, conn: Connection, msg: Message) -> dict[str, str]:
    """The header values to set on ``msg`` arriving on ``conn``."""
    updates = {Header.REMOTE_ADDR: conn.remote_addr, Header.BROKER: ctx.address}
    if not msg.mq_reply:
        updates[Header.MQ_REPLY] = conn.session_id
    return updates


def stamp(ctx: ServerContext, conn: Connection, msg: Message) -> Message:
    """``msg`` with the §5 headers set."""
    return msg.with_headers(stamp_updates(ctx, conn, msg))
