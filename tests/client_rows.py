"""Putting client rows in the store for console and API tests, through a real engine: a
client says what it is, produces or consumes, and its process stays live after the call
(as a broker's does), so its connections keep counting."""

from __future__ import annotations

import time

import redis
from django.conf import settings

from brokers.engine import Engine, Message
from brokers.engine.keys import holders_key
from tests.engine_calls import engine_call

JAVA = ("jmq4", "JAVA", "4.2.3")
LIVE_FOR_MS = 300_000
"""How long the calling "process" stays live after the call."""


def put_client(
    address: str,
    app: str,
    topic: str = "orders",
    kind: tuple[str, ...] = JAVA,
    *,
    how: str = "connected",
    produce: bool = True,
    consume: bool = False,
) -> None:
    """``app``'s client at ``address`` says it is ``kind`` (protocol, language, version)
    ``how``: ``connected`` (a live connection), ``disconnected`` (connected, did what it
    did, closed), ``described`` (a request without a connection, as HTTP-MQ's) or
    ``silent`` (its front-end said nothing); then it produces to and/or consumes from
    ``topic``."""

    async def run(engine: Engine) -> str:
        if how in ("connected", "disconnected"):
            engine.client_connected(address, app, *kind)
        elif how == "described":
            engine.client_described(address, app, *kind)
        if produce:
            await engine.append(topic, app, [Message(b"x")], partition=0, client_address=address)
        if consume:
            await engine.fetch(topic, app, count=1, address=address)
        if how == "disconnected":
            engine.client_disconnected(address)
        await engine.clients.flush()
        engine.clients._connections.clear()  # the process lives on: close withdraws nothing
        return engine.holders.id

    holder = engine_call(run)
    client = redis.Redis.from_url(settings.REDIS_URL)
    try:
        client.zadd(holders_key(), {holder: int(time.time() * 1000) + LIVE_FOR_MS})
    finally:
        client.close()
