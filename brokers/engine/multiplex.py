"""One Redis connection carrying the script calls of many concurrent requests (RESP pipelining).

redis-py's asyncio client gives every command or pipeline a connection of its own for the
whole round trip and reads each reply through several layers (a timeout context, retry
wrapper and response callbacks): on a busy broker that cost more CPU than the request
itself. A :class:`Multiplexer` keeps ONE connection of the client's pool: callers' commands
are written as soon as they are queued, whether or not earlier replies have come back, and
one reader task parses replies with hiredis and hands each to the next waiting caller —
Redis answers the commands of a connection in the order they arrived.

The connection is taken from the client's own pool, so it is set up exactly as redis-py
sets up any other (TLS, unix sockets, AUTH, SELECT, client name, RESP2 or RESP3 — redis-py
8 speaks RESP3 by default) and is closed with the pool. Replies are parsed by hiredis as
redis-py's own hiredis parser parses them, with the same "not enough data" marker (a RESP3
``false`` is a reply, not a missing one). Its byte streams are redis-py's private
``_reader`` / ``_writer`` attributes (present in redis-py 4–8;
``tests/engine/test_multiplex.py`` fails if they go away).

Commands registered with :func:`send_first` open every connection, before the calls that
waited for it: the engine's scripts are loaded so (``SCRIPT LOAD`` of a script Redis knows
costs it a hash lookup). After a Redis restart the first call of each script would
otherwise meet NOSCRIPT and go again behind calls queued after it — an append behind the
lease of the consumer it woke early, which then found nothing.

A caller that is cancelled still has its reply read (and dropped), so a cancellation never
desynchronises the connection. When the connection fails, every waiting caller gets the
error and the next call takes a new connection. Blocking commands (WAIT, BLPOP, …) must not
go through a multiplexer: they would hold up every other caller.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Sequence
from typing import Any

import hiredis
import redis.asyncio as aioredis
from redis._parsers.base import BaseParser
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import DataError, InvalidResponse

log = logging.getLogger(__name__)

Call = tuple[tuple[Any, ...], "asyncio.Future[Any]"]
_READ_SIZE = 1 << 16
NOT_ENOUGH_DATA = object()
"""What a :func:`hiredis_reader` returns while a reply is incomplete (a RESP3 ``false`` is a
reply)."""


_FIRST: dict[str, tuple[Any, ...]] = {}
"""Key → a command every new connection runs first (:func:`send_first`)."""


def send_first(key: str, *command: Any) -> None:
    """Have every connection a multiplexer opens from now on run ``command`` before any
    call (one command per ``key``; a later one replaces it). Its reply is dropped; an
    error reply is logged."""
    _FIRST[key] = command


def _log_failure(fut: asyncio.Future[Any]) -> None:
    if fut.cancelled():
        return
    exc = fut.exception()
    if exc is None or isinstance(exc, RedisConnectionError):
        return  # the connection's failure: its callers hear of it and log it
    log.warning("a command that opens each Redis connection failed: %s", exc)


def pack(command: Sequence[Any]) -> bytes:
    """``command`` in RESP, as redis-py's hiredis packer writes it (bytearray and memoryview
    arguments as their bytes; anything else hiredis cannot pack is a DataError)."""
    try:
        return hiredis.pack_command(tuple(command))
    except TypeError:
        args = tuple(bytes(a) if isinstance(a, bytearray | memoryview) else a for a in command)
        try:
            return hiredis.pack_command(args)
        except TypeError as exc:
            raise DataError(str(exc)) from None


def hiredis_reader(pool: Any) -> hiredis.Reader:
    """A hiredis parser for the connections of ``pool``, set up as redis-py's own hiredis
    parser is (its error classes, its decoding); :data:`NOT_ENOUGH_DATA` while a reply is
    incomplete."""
    args: dict[str, Any] = {
        "protocolError": InvalidResponse,
        "replyError": BaseParser.parse_error,
        "notEnoughData": NOT_ENOUGH_DATA,
    }
    kwargs = pool.connection_kwargs
    if kwargs.get("decode_responses"):
        args["encoding"] = kwargs.get("encoding", "utf-8")
        args["errors"] = kwargs.get("encoding_errors", "strict")
    return hiredis.Reader(**args)


class Multiplexer:
    """Pipelined calls on one connection of ``client``'s pool, on ``loop``."""

    def __init__(self, client: aioredis.Redis, loop: asyncio.AbstractEventLoop) -> None:
        self._pool = client.connection_pool
        self.loop = loop
        self._conn: Any = None  # the connected redis-py connection in use
        self._waiting: collections.deque[asyncio.Future[Any]] = collections.deque()
        self._backlog: list[Call] = []  # calls queued while connecting
        self._connecting: asyncio.Task[None] | None = None
        self._reading: asyncio.Task[None] | None = None

    @property
    def in_flight(self) -> int:
        """Calls written and not yet answered."""
        return len(self._waiting)

    def send(self, calls: list[Call]) -> None:
        """Write ``calls`` now (or as soon as the connection is up); each future gets its
        reply, the error reply as an exception, or the connection's failure."""
        if self._conn is not None:
            self._write(calls)
            return
        self._backlog.extend(calls)
        if self._connecting is None:
            self._connecting = self.loop.create_task(self._connect())

    def _write(self, calls: list[Call]) -> None:
        chunks = []
        for command, fut in calls:
            if fut.done():  # cancelled before it was sent: nothing to match
                continue
            try:
                chunks.append(pack(command))
            except DataError as exc:
                fut.set_exception(exc)
                continue
            self._waiting.append(fut)
        if chunks:
            self._conn._writer.write(b"".join(chunks))

    async def _connect(self) -> None:
        try:
            conn = await self._pool.get_connection()
            await conn.connect()  # a no-op when the pool handed over a connected one
        except asyncio.CancelledError:
            self._fail(self._backlog, RedisConnectionError("connection attempt cancelled"))
            self._backlog = []
            raise
        except Exception as exc:  # Redis unreachable: the queued callers hear of it
            self._fail(self._backlog, exc)
            self._backlog = []
            return
        finally:
            self._connecting = None
        self._conn = conn
        self._reading = self.loop.create_task(self._read(conn))
        first: list[Call] = [(command, self.loop.create_future()) for command in _FIRST.values()]
        for _, fut in first:
            fut.add_done_callback(_log_failure)
        backlog, self._backlog = self._backlog, []
        self._write(first + backlog)

    async def _read(self, conn: Any) -> None:
        parser = hiredis_reader(self._pool)
        stream = conn._reader
        waiting = self._waiting
        error: BaseException = RedisConnectionError("Redis closed the connection")
        try:
            while True:
                data = await stream.read(_READ_SIZE)
                if not data:
                    break
                parser.feed(data)
                reply = parser.gets()
                while reply is not NOT_ENOUGH_DATA:
                    if not waiting:
                        raise InvalidResponse("a reply nobody asked for")
                    fut = waiting.popleft()
                    if not fut.done():
                        if isinstance(reply, Exception):
                            fut.set_exception(reply)
                        else:
                            fut.set_result(reply)
                    reply = parser.gets()
        except asyncio.CancelledError:
            error = RedisConnectionError("the multiplexed connection was closed")
            raise
        except Exception as exc:
            log.warning("multiplexed Redis connection failed: %s", exc)
            error = exc if isinstance(exc, RedisConnectionError) else RedisConnectionError(str(exc))
        finally:
            self._conn = None
            self._reading = None
            waiting_now = list(waiting)
            waiting.clear()
            for fut in waiting_now:
                if not fut.done():
                    fut.set_exception(error)
            await self._drop(conn)

    async def _drop(self, conn: Any) -> None:
        try:
            await conn.disconnect()
        finally:
            await self._pool.release(conn)

    @staticmethod
    def _fail(calls: list[Call], exc: BaseException) -> None:
        for _, fut in calls:
            if not fut.done():
                fut.set_exception(exc)
