"""Script calls share ONE pipelined connection: replies reach their own callers in order,
errors stay per caller, and a dropped connection fails the waiting callers and is replaced."""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import DataError, NoScriptError, ResponseError

from brokers.engine import multiplex
from brokers.engine.coalesce import coalescer
from brokers.engine.multiplex import Multiplexer, pack
from brokers.engine.redisio import Script

ECHO = Script("return {KEYS[1], ARGV[1]}")


async def _connections_running(
    admin: aioredis.Redis, command: str, *, name: str | None = None
) -> list[str]:
    """Ids of the connections (named ``name``, if given) whose last command was ``command``."""
    return [
        c["id"]
        for c in await admin.client_list()
        if c.get("cmd") == command and (name is None or c.get("name") == name)
    ]


async def test_the_private_streams_it_relies_on_exist(redis_url):
    """redis-py connections keep their asyncio streams as ``_reader`` / ``_writer``."""
    client = aioredis.from_url(redis_url)
    try:
        conn = await client.connection_pool.get_connection()
        assert isinstance(conn._reader, asyncio.StreamReader)
        assert isinstance(conn._writer, asyncio.StreamWriter)
        await client.connection_pool.release(conn)
    finally:
        await client.aclose()


async def test_many_turns_of_calls_share_one_connection(redis_url):
    client = aioredis.from_url(redis_url, client_name="mux-turns")
    watcher = aioredis.from_url(redis_url)
    try:
        await client.script_load(ECHO.source)
        # calls of many loop turns in flight at once, still answered in order
        tasks = []
        for turn in range(20):
            tasks += [asyncio.ensure_future(ECHO(client, [f"t{turn}"], [i])) for i in range(25)]
            await asyncio.sleep(0)
        results = await asyncio.gather(*tasks)
        expected = [[f"t{t}".encode(), str(i).encode()] for t in range(20) for i in range(25)]
        assert results == expected
        assert len(await _connections_running(watcher, "evalsha", name="mux-turns")) == 1
    finally:
        await watcher.aclose()
        await client.aclose()


async def test_error_replies_stay_with_their_caller(redis_url):
    client = aioredis.from_url(redis_url)
    try:
        mux = coalescer(client)._mux
        assert mux is not None
        loop = asyncio.get_running_loop()
        calls = [
            (("EVALSHA", "0" * 40, 0), loop.create_future()),
            (("SET", "mux-k", "v"), loop.create_future()),
            (("INCR", "mux-k"), loop.create_future()),
            (("GET", "mux-k"), loop.create_future()),
        ]
        mux.send(calls)
        replies = await asyncio.gather(*(f for _, f in calls), return_exceptions=True)
        assert isinstance(replies[0], NoScriptError)
        assert replies[1] == b"OK"
        assert isinstance(replies[2], ResponseError)
        assert replies[3] == b"v"
    finally:
        await client.aclose()


async def test_a_killed_connection_fails_its_waiting_callers_then_is_replaced(redis_url):
    client = aioredis.from_url(redis_url, client_name="mux-kill")
    admin = aioredis.from_url(redis_url)
    try:
        mux = coalescer(client)._mux
        assert mux is not None
        # a caller left waiting on the multiplexed connection (a blocking pop: a test-only use)
        waiting = asyncio.get_running_loop().create_future()
        mux.send([(("BLPOP", "mux-empty", 10), waiting)])
        for _ in range(100):
            ids = await _connections_running(admin, "blpop", name="mux-kill")
            if ids:
                break
            await asyncio.sleep(0.01)
        await admin.execute_command("CLIENT", "KILL", "ID", ids[0])
        with pytest.raises(RedisConnectionError):
            await asyncio.wait_for(waiting, 5)
        await client.script_load(ECHO.source)
        assert await ECHO(client, ["k"], ["again"]) == [b"k", b"again"]
    finally:
        await admin.aclose()
        await client.aclose()


@pytest.mark.parametrize("protocol", [2, 3])
async def test_replies_decode_like_the_client_does(redis_url, protocol):
    """Every reply type as redis-py returns it, a RESP3 ``false`` included (it must not pass
    for "no reply yet", which would hand later replies to the wrong callers)."""
    plain = aioredis.from_url(redis_url, protocol=protocol)
    text = aioredis.from_url(redis_url, protocol=protocol, decode_responses=True)
    try:
        await plain.script_load(ECHO.source)
        assert await ECHO(text, ["k"], ["välue"]) == ["k", "välue"]
        scripts = [
            "redis.setresp(3) return false",  # RESP3: a boolean false reply
            "redis.setresp(3) return true",
            "return false",
            "return true",
            "return nil",
            "return 7",
            "return {1, 'a', {2}}",
            "return redis.status_reply('FINE')",
        ]
        for source in scripts:
            await plain.script_load(Script(source).source)
        via_mux = await asyncio.wait_for(
            asyncio.gather(*(Script(src)(plain, [], []) for src in scripts)), 5
        )
        direct = [await plain.eval(Script(src).source, 0) for src in scripts]
        assert via_mux == direct
        assert await ECHO(plain, ["k"], ["after"]) == [b"k", b"after"]
    finally:
        await plain.aclose()
        await text.aclose()


async def test_unreachable_redis_fails_the_queued_calls_and_later_ones(redis_url):
    client = aioredis.from_url("redis://127.0.0.1:1")
    try:
        for _ in range(2):
            results = await asyncio.gather(
                *(ECHO(client, ["k"], [i]) for i in range(3)), return_exceptions=True
            )
            assert all(isinstance(r, RedisConnectionError) for r in results)
    finally:
        await client.aclose()


async def test_closing_the_pool_ends_the_reader(redis_url):
    client = aioredis.from_url(redis_url)
    mux = Multiplexer(client, asyncio.get_running_loop())
    fut = asyncio.get_running_loop().create_future()
    mux.send([(("PING",), fut)])
    assert await fut == b"PONG"
    await client.connection_pool.disconnect()
    for _ in range(50):
        if mux._reading is None:
            break
        await asyncio.sleep(0.01)
    assert mux._reading is None and mux.in_flight == 0
    await client.aclose()


async def test_bytes_like_arguments_are_sent_as_bytes_and_unpackable_ones_fail_alone(redis_url):
    assert pack(("SET", "k", bytearray(b"v"))) == pack(("SET", "k", b"v"))
    assert pack(("SET", "k", memoryview(b"v"))) == pack(["SET", "k", b"v"])
    with pytest.raises(DataError):
        pack(("SET", "k", None))
    client = aioredis.from_url(redis_url)
    try:
        mux = coalescer(client)._mux
        assert mux is not None
        loop = asyncio.get_running_loop()
        calls = [(("SET", "mux-p", None), loop.create_future()), (("PING",), loop.create_future())]
        mux.send(calls)
        with pytest.raises(DataError):
            await calls[0][1]
        assert await calls[1][1] in (b"PONG", "PONG")
    finally:
        await client.aclose()


async def test_each_new_connection_runs_the_registered_commands_first(redis_url, caplog):
    """send_first: every connection a multiplexer opens runs them before any call (the
    engine's scripts are loaded so); an error reply is logged, the calls go on."""
    client = aioredis.from_url(redis_url)
    admin = aioredis.from_url(redis_url)
    try:
        await admin.script_flush()
        assert (await admin.script_exists(ECHO.sha)) == [False]
        multiplex.send_first("test-first-bad", "NO-SUCH-COMMAND")
        loop = asyncio.get_running_loop()
        mux = Multiplexer(client, loop)
        call = (("EVALSHA", ECHO.sha, 1, "k", "v"), loop.create_future())
        mux.send([call])  # connecting: the scripts go first
        assert await call[1] == [b"k", b"v"]
        assert any("opens each Redis connection failed" in r.message for r in caplog.records)
        assert (await admin.script_exists(ECHO.sha)) == [True]
    finally:
        multiplex._FIRST.pop("test-first-bad", None)
        await admin.aclose()
        await client.aclose()
