"""Short engine sessions for the console and its API (through the engine's public API),
and short store clients for what needs no catalog (:func:`run_on_store`).

Each session opens a Redis client and brings this process's catalog up to date — one
read of the catalog log, which is empty when nothing changed — and closes the client
when done. The catalog itself is kept by the process between sessions (the one
``brokers.catalog_loader.process_catalog`` that its synchronous readers share too), so a
console request never decodes the whole catalog.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import TypeVar

import redis.asyncio as aioredis
from asgiref.sync import async_to_sync
from django.conf import settings

from brokers.catalog_loader import process_catalog
from brokers.engine import AnyRedis, Engine, catch_up, engine_client

T = TypeVar("T")


@asynccontextmanager
async def engine_session() -> AsyncIterator[Engine]:
    """An Engine over the newest catalog, closed on exit."""
    client = aioredis.from_url(settings.REDIS_URL)
    try:
        await catch_up(client, process_catalog)
        snapshot = process_catalog.current
        engine = Engine(client, lambda: snapshot)
        try:
            yield engine
        finally:
            await engine.close()
    finally:
        await client.aclose()


def run_in_session(fn: Callable[[Engine], Awaitable[T]]) -> T:
    """``fn(engine)`` in a short engine session, from synchronous code (errors raised as
    they are)."""

    async def call() -> T:
        async with engine_session() as engine:
            return await fn(engine)

    return async_to_sync(call)()


def run_on_store(fn: Callable[[AnyRedis], Awaitable[T]], *, timeout_s: float = 5) -> T:
    """``fn(client)`` on a short-lived Redis client with ``timeout_s`` socket timeouts,
    without a catalog: for what processes share about themselves (reports, exits), which
    needs no engine session."""

    async def call() -> T:
        client = engine_client(
            settings.REDIS_URL, socket_timeout=timeout_s, socket_connect_timeout=timeout_s
        )
        try:
            return await fn(client)
        finally:
            await client.aclose()

    return async_to_sync(call)()
