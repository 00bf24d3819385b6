"""Script calls of one loop turn share a pipeline, yet each caller gets its own reply or
error; the broker's client packs commands with hiredis exactly as redis-py would."""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio as aioredis
from redis.exceptions import ResponseError

from brokers.engine.redisio import HiredisPackedConnection, Script, broker_client

ECHO = Script("return {KEYS[1], ARGV[1]}")
FAIL_ON_BAD = Script(
    "if ARGV[1] == 'bad' then return redis.error_reply('ERR bad') end return ARGV[1]"
)


async def test_each_caller_gets_its_own_reply_or_error(redis_url):
    client = aioredis.from_url(redis_url)
    try:
        await client.script_flush()  # first calls meet NOSCRIPT and fall back to EVAL
        calls = [ECHO(client, [f"k{i}"], [i]) for i in range(40)]
        calls += [FAIL_ON_BAD(client, [], ["ok"]), FAIL_ON_BAD(client, [], ["bad"])]
        results = await asyncio.gather(*calls, return_exceptions=True)
        assert results[:40] == [[f"k{i}".encode(), str(i).encode()] for i in range(40)]
        assert results[40] == b"ok"
        assert isinstance(results[41], ResponseError) and "bad" in str(results[41])
        # once loaded, one turn's calls go out as one pipeline and still come back in order
        again = await asyncio.gather(*(ECHO(client, ["k"], [i]) for i in range(300)))
        assert [int(r[1]) for r in again] == list(range(300))
    finally:
        await client.aclose()


async def test_a_cancelled_caller_does_not_disturb_the_others(redis_url):
    client = aioredis.from_url(redis_url)
    try:
        keep = asyncio.ensure_future(ECHO(client, ["a"], [1]))
        drop = asyncio.ensure_future(ECHO(client, ["b"], [2]))
        await asyncio.sleep(0)
        drop.cancel()
        assert await keep == [b"a", b"1"]
        with pytest.raises(asyncio.CancelledError):
            await drop
        assert await ECHO(client, ["c"], [3]) == [b"c", b"3"]
    finally:
        await client.aclose()


async def test_a_lost_connection_fails_every_queued_caller(redis_url):
    client = aioredis.from_url("redis://127.0.0.1:1")  # nothing listens there
    try:
        results = await asyncio.gather(
            *(ECHO(client, ["k"], [i]) for i in range(3)), return_exceptions=True
        )
        assert all(isinstance(r, Exception) for r in results)
    finally:
        await client.aclose()


async def test_broker_client_packs_with_hiredis_like_redis_py(redis_url):
    client = broker_client(redis_url, max_connections=4)
    try:
        assert client.connection_pool.connection_class is HiredisPackedConnection
        await client.set("s", "välue")
        await client.set(b"b", b"\x00\xff")
        await client.set("i", 12)
        await client.set("f", 1.5)
        assert await client.mget("s", "b", "i", "f") == [
            "välue".encode(),
            b"\x00\xff",
            b"12",
            b"1.5",
        ]
        assert "maxmemory" in await client.config_get("maxmemory")  # a two-word command
    finally:
        await client.aclose()
        await client.connection_pool.disconnect()


async def test_a_restarted_redis_gets_each_script_loaded_without_a_connection_per_caller(
    redis_url,
):
    """Hundreds of calls meeting NOSCRIPT at once (a Redis that restarted) load the script
    on the pipelined connection: the pool is not asked for a connection per caller."""
    client = aioredis.from_url(redis_url, max_connections=4)
    try:
        await client.script_flush()
        results = await asyncio.gather(*(ECHO(client, [f"k{i}"], [i]) for i in range(500)))
        assert [int(r[1]) for r in results] == list(range(500))
        assert len(client.connection_pool._in_use_connections) <= 1
    finally:
        await client.aclose()
