"""The engine's pub/sub connection reads what redis-py's ``PubSub`` reads, message for
message, on RESP2 and RESP3, bytes or decoded; a timeout loses nothing; a lost connection
says so and stays lost; on a cluster redis-py's own is used."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import ConnectionError as RedisConnectionError

from brokers.engine.pubsub import PubSubConnection, open_pubsub


@contextlib.asynccontextmanager
async def subscribed(redis_url: str, channel: str) -> AsyncIterator[tuple]:
    """(client, admin client, a PubSubConnection of the client confirmed on ``channel``);
    the client's connections are named after the channel."""
    client = aioredis.from_url(redis_url, client_name=f"test-{channel}")
    admin = aioredis.from_url(redis_url)
    pubsub = PubSubConnection(client)
    try:
        await pubsub.subscribe(channel)
        assert (await _messages(pubsub, 1))[0]["type"] == "subscribe"
        yield client, admin, pubsub
    finally:
        await pubsub.aclose()
        await admin.aclose()
        await client.aclose()


async def _messages(pubsub, count: int) -> list[dict]:
    out = []
    while len(out) < count:
        msg = await asyncio.wait_for(pubsub.get_message(timeout=None), 5)
        if msg is not None:
            out.append(msg)
    return out


@pytest.mark.parametrize("protocol", [2, 3])
@pytest.mark.parametrize("decode", [False, True])
async def test_it_reads_what_redis_py_reads(redis_url, protocol, decode) -> None:
    client = aioredis.from_url(redis_url, protocol=protocol, decode_responses=decode)
    ours, theirs = PubSubConnection(client), client.pubsub()
    try:
        for pubsub in (ours, theirs):
            await pubsub.subscribe("ps:a", "ps:b")
        for pubsub in (ours, theirs):  # both confirmed before anything is published
            await _messages(pubsub, 2)
        await client.publish("ps:a", b"x\x00\xff" if not decode else "x")
        await client.publish("ps:b", 7)
        await client.publish("ps:a", b"")
        got = await _messages(ours, 3)
        assert got == await _messages(theirs, 3)
        assert [m["type"] for m in got] == ["message"] * 3
    finally:
        await ours.aclose()
        await theirs.aclose()
        await client.aclose()


async def test_confirmations_look_like_redis_pys(redis_url) -> None:
    client = aioredis.from_url(redis_url)
    ours, theirs = PubSubConnection(client), client.pubsub()
    try:
        for pubsub in (ours, theirs):
            await pubsub.subscribe("ps:c", "ps:d")
        assert await _messages(ours, 2) == await _messages(theirs, 2)
    finally:
        await ours.aclose()
        await theirs.aclose()
        await client.aclose()


async def test_a_timeout_returns_none_and_loses_nothing(redis_url) -> None:
    async with subscribed(redis_url, "ps:t") as (client, _, pubsub):
        assert await pubsub.get_message(timeout=0.05) is None
        await client.publish("ps:t", b"later")
        assert (await pubsub.get_message(timeout=5))["data"] == b"later"
        pipe = client.pipeline(transaction=False)
        for i in range(3):
            pipe.publish("ps:t", b"m%d" % i)
        await pipe.execute()
        await asyncio.sleep(0.1)  # all three arrive in one read: handed out one per call
        got = [await pubsub.get_message(timeout=0) for _ in range(3)]
        assert [m["data"] for m in got] == [b"m0", b"m1", b"m2"]
        assert await pubsub.get_message(timeout=0.01) is None


async def test_a_killed_connection_raises_and_stays_lost(redis_url) -> None:
    async with subscribed(redis_url, "ps:k") as (client, admin, pubsub):
        # only this test's connection: the session's Redis has others' subscribers
        [mine] = [c for c in await admin.client_list() if c.get("name") == "test-ps:k"]
        assert await admin.client_kill_filter(_id=mine["id"]) == 1
        with pytest.raises(RedisConnectionError):
            await asyncio.wait_for(pubsub.get_message(timeout=None), 5)
        with pytest.raises(RedisConnectionError):
            await pubsub.subscribe("ps:k")
        with pytest.raises(RedisConnectionError):
            await pubsub.get_message(timeout=0)
        assert not client.connection_pool._in_use_connections  # given back


async def test_closing_gives_the_connection_back(redis_url) -> None:
    async with subscribed(redis_url, "ps:z") as (client, admin, pubsub):
        assert len(client.connection_pool._in_use_connections) == 1
        await pubsub.aclose()
        await pubsub.aclose()  # idempotent
        assert not client.connection_pool._in_use_connections
        await asyncio.sleep(0.05)
        assert await admin.pubsub_numsub("ps:z") == [(b"ps:z", 0)]


async def test_an_unreachable_redis_is_a_connection_error() -> None:
    client = aioredis.from_url("redis://127.0.0.1:1", socket_connect_timeout=1)
    pubsub = PubSubConnection(client)
    try:
        with pytest.raises(RedisConnectionError):
            await pubsub.subscribe("ps:u")
    finally:
        await pubsub.aclose()
        await client.aclose()


async def test_a_cluster_gets_redis_pys_own(store) -> None:
    pubsub = open_pubsub(store)
    try:
        assert isinstance(pubsub, PubSubConnection) != isinstance(store, RedisCluster)
    finally:
        await pubsub.aclose()
