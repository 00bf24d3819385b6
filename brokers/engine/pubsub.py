"""A Redis pub/sub connection read with hiredis directly (the notifier's, an inbox's).

Every process that waits on a topic receives each of its appends' notifications, and an
RPC reply crossing processes is one message on an inbox. redis-py's asyncio ``PubSub``
reads each message through its connection's read path, a timeout context, a retry
wrapper and response callbacks, then builds its dict: about 8 µs of CPU per message on
the 2-core development machine, against 0.5 µs for hiredis parsing what arrived. In a
fleet that cost repeats in every process for every notification.

:func:`open_pubsub` gives, for a single Redis, a :class:`PubSubConnection`: it takes one
connection of the client's pool (set up exactly as redis-py sets up any other — TLS,
AUTH, SELECT, RESP2 or RESP3), writes its SUBSCRIBE commands itself and parses what
arrives with the same hiredis parser redis-py would use (:func:`~brokers.engine.multiplex.
hiredis_reader`), handing out the dicts redis-py's ``get_message`` returns. On Redis
Cluster it gives redis-py's own ``PubSub``. Like the multiplexer it relies on redis-py's
private ``_reader`` / ``_writer`` streams (``tests/engine/test_multiplex.py`` fails if
they go away).
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError

from brokers.engine.multiplex import NOT_ENOUGH_DATA, hiredis_reader, pack
from brokers.engine.redisio import AnyRedis

_READ_SIZE = 1 << 16


class PubSub(Protocol):
    """What the engine uses of a pub/sub connection (redis-py's ``PubSub`` has it too)."""

    async def subscribe(self, *channels: str) -> None:
        """Ask for ``channels``; each is confirmed by a ``subscribe`` message."""

    async def get_message(
        self,
        timeout: float | None = None,  # noqa: ASYNC109 (redis-py's signature)
    ) -> dict[str, Any] | None:
        """The next message (``type``, ``channel``, ``data``, ``pattern``); None when
        none came within ``timeout`` seconds (None: wait as long as it takes)."""

    async def aclose(self) -> None:
        """Close the connection and give it back to its pool."""


def open_pubsub(client: AnyRedis) -> PubSub:
    """A pub/sub connection of ``client``: a :class:`PubSubConnection` on a single Redis,
    redis-py's own on a cluster (it subscribes on a node it picks)."""
    if type(client) is aioredis.Redis:
        return PubSubConnection(client)
    return client.pubsub()  # type: ignore[no-any-return]


class PubSubConnection:
    """One subscribing connection of ``client``'s pool, made when first used; once it
    failed (or was closed) it is not used again: every later call raises
    ``ConnectionError`` and the owner opens a new one."""

    def __init__(self, client: aioredis.Redis) -> None:
        self._pool = client.connection_pool
        self._conn: Any = None
        self._parser: Any = None
        self._ended = False

    async def _connection(self) -> Any:
        if self._ended:
            raise RedisConnectionError("the pub/sub connection is closed")
        if self._conn is None:
            conn = await self._pool.get_connection()
            try:
                await conn.connect()  # a no-op when the pool handed over a connected one
            except BaseException:
                await self._pool.release(conn)
                raise
            self._conn, self._parser = conn, hiredis_reader(self._pool)
        return self._conn

    async def subscribe(self, *channels: str) -> None:
        """Write SUBSCRIBE for ``channels`` (confirmed by :meth:`get_message`)."""
        await self._write("SUBSCRIBE", *channels)

    async def unsubscribe(self, *channels: str) -> None:
        """Write UNSUBSCRIBE for ``channels`` (confirmed by :meth:`get_message`)."""
        await self._write("UNSUBSCRIBE", *channels)

    async def _write(self, *command: str) -> None:
        conn = await self._connection()
        try:
            conn._writer.write(pack(command))
            await conn._writer.drain()
        except OSError as exc:  # reset, broken pipe
            await self.aclose()
            raise RedisConnectionError(f"pub/sub connection lost: {exc}") from exc

    async def get_message(
        self,
        timeout: float | None = None,  # noqa: ASYNC109 (redis-py's signature)
    ) -> dict[str, Any] | None:
        """The next message; None when none came within ``timeout`` seconds (what arrived
        meanwhile stays for the next call); ``ConnectionError`` once the connection is gone."""
        conn = await self._connection()
        parser = self._parser
        reply = parser.gets()
        while reply is NOT_ENOUGH_DATA:
            try:
                if timeout is None:
                    data = await conn._reader.read(_READ_SIZE)
                else:
                    async with asyncio.timeout(timeout):
                        data = await conn._reader.read(_READ_SIZE)
            except TimeoutError:
                return None
            except OSError as exc:
                await self.aclose()
                raise RedisConnectionError(f"pub/sub connection lost: {exc}") from exc
            if not data:
                await self.aclose()
                raise RedisConnectionError("Redis closed the pub/sub connection")
            parser.feed(data)
            reply = parser.gets()
        if isinstance(reply, Exception):  # an error reply (a refused SUBSCRIBE)
            raise reply
        return _message(reply)

    async def aclose(self) -> None:
        """Close the connection and give it back to the pool (idempotent); also what a
        lost connection gets: it is never used again."""
        self._ended = True
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                await conn.disconnect()
            finally:
                await self._pool.release(conn)


def _message(reply: Any) -> dict[str, Any]:
    """A pub/sub reply (``[kind, channel, data]``, ``[b"pmessage", pattern, channel,
    data]``; a RESP3 push arrives the same way) as redis-py's ``get_message`` gives it."""
    if not isinstance(reply, list) or len(reply) < 3:
        raise RedisConnectionError(f"unexpected reply on a pub/sub connection: {reply!r:.80}")
    kind = reply[0].decode() if isinstance(reply[0], bytes) else str(reply[0])
    if kind == "pmessage" and len(reply) >= 4:
        return {"type": kind, "pattern": reply[1], "channel": reply[2], "data": reply[3]}
    return {"type": kind, "pattern": None, "channel": reply[1], "data": reply[2]}
