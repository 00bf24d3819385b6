"""Pipelined produces are stored in batches yet keep their order and their own outcomes."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest
import redis

from brokers.catalog_loader import publish
from brokers.models import Topic
from tests.zbus.conftest import SECRET, TEST_CONFIG, Broker_, Raw, msg

pytestmark = pytest.mark.django_db(transaction=True)


async def test_pipelined_produces_keep_order_and_each_get_an_ack(broker, raw: Raw) -> None:
    n = 300  # more than one engine call's worth
    await raw.send(
        b"".join(
            msg("cmd: produce", "mq: orders", f"msgid: p{i}", body=b"m%d" % i) for i in range(n)
        )
    )
    acks = [await raw.recv() for _ in range(n)]
    assert sorted(a.msgid for a in acks) == sorted(f"p{i}" for i in range(n))
    assert {a.status for a in acks} == {200}
    assert (await broker.engine.queue_stats("orders")).ready == n
    await raw.send(msg("cmd: consume", "mq: orders", "msgid: c", f"window: {n}"))
    got = [await raw.recv() for _ in range(n)]
    assert [m.body for m in got] == [b"m%d" % i for i in range(n)]


async def test_mixed_tokens_and_refusals_in_one_pipeline(broker, catalog, raw: Raw) -> None:
    """Produces acting as an app and as nobody alternate on one MQ; a refused one in the
    middle gets its 403 and the rest are stored in order."""
    frames = []
    for i in range(12):
        token = [SECRET, catalog.app_token, "wrong"][i % 3]
        frames.append(
            msg("cmd: produce", "mq: secure", f"msgid: s{i}", f"token: {token}", body=b"%d" % i)
        )
    await raw.send(b"".join(frames))
    replies = {m.msgid: m.status for m in [await raw.recv() for _ in range(12)]}
    assert replies == {f"s{i}": 403 if i % 3 == 2 else 200 for i in range(12)}
    await raw.send(msg("cmd: consume", "mq: secure", "msgid: c", "window: 20", f"token: {SECRET}"))
    got = [await raw.recv() for _ in range(8)]
    assert [m.body for m in got] == [b"%d" % i for i in range(12) if i % 3 != 2]


async def test_pipelined_pubsub_publishes_keep_order(broker) -> None:
    sub, pub = await Raw.open(broker.port), await Raw.open(broker.port)
    try:
        await sub.send(msg("cmd: consume", "mq: news", "msgid: s", "topic: *", "window: -1"))
        for _ in range(50):  # the subscription registers concurrently
            await pub.send(msg("cmd: produce", "mq: news", "msgid: probe", "topic: x"))
            await pub.recv()
            try:
                if (await sub.recv(0.1)).body == b"":
                    break
            except TimeoutError:
                continue
        n = 100
        await pub.send(
            b"".join(
                msg("cmd: produce", "mq: news", f"msgid: n{i}", "topic: t", body=b"%d" % i)
                for i in range(n)
            )
        )
        assert {(await pub.recv()).status for _ in range(n)} == {200}
        bodies: list[bytes] = []
        while len(bodies) < n:
            body = (await sub.recv()).body
            if body:  # a late probe may still come first
                bodies.append(body)
        assert bodies == [b"%d" % i for i in range(n)]
    finally:
        await sub.close()
        await pub.close()


async def test_queued_produces_count_against_the_connection_and_a_stop_answers_them(
    catalog, redis_url: str
) -> None:
    """Produces to a catalog MQ wait on their line without a task of their own: each
    still counts as one of the connection's requests (reading pauses at
    ``max_inflight``), and a graceful stop waits for their store and sends their 200s
    before closing."""
    b = Broker_(redis_url)
    await b.start(dataclasses.replace(TEST_CONFIG, max_inflight=8, shutdown_grace=5.0))
    pauser = redis.Redis.from_url(redis_url)
    raw = await Raw.open(b.port)
    try:
        await raw.send(msg("cmd: produce", "mq: orders", "msgid: warm", body=b"w"))
        assert (await raw.recv()).status == 200
        pauser.execute_command("CLIENT", "PAUSE", 600, "WRITE")  # stores wait
        await raw.send(
            b"".join(
                msg("cmd: produce", "mq: orders", f"msgid: p{i}", body=b"x") for i in range(20)
            )
        )
        (proto,) = b.server._connections
        for _ in range(200):  # the 20 frames of one read are decoded and queued together
            if proto.requests >= 8:
                break
            await asyncio.sleep(0.01)
        assert proto.busy  # reading paused: the queued produces are counted
        stopping = asyncio.create_task(b.server.stop(grace=5.0))
        replies = [await raw.recv(5) for _ in range(20)]
        await stopping
    finally:
        pauser.execute_command("CLIENT", "UNPAUSE")
        await raw.close()
        await b.engine.close()
        await b.watcher.stop()
        await b.redis.aclose()
    assert [r.msgid for r in replies] == [f"p{i}" for i in range(20)]
    assert {r.status for r in replies} == {200}


@pytest.fixture
def orders_bounded_at_3(catalog) -> None:
    """``orders`` holds at most 3 messages and refuses more (BlockPublisher)."""
    Topic.objects.filter(code="orders").update(
        max_queue_size=3, overflow_policy=Topic.Overflow.BLOCK_PUBLISHER
    )
    publish()


async def test_a_run_decoded_together_answers_each_produce_on_its_own(
    orders_bounded_at_3, redis_url
) -> None:
    """Produces read together are stored as one run, yet each gets its own answer: on
    a queue bounded at 3, the first three of a pipelined run are stored and the rest
    refused with 500, each with its own msgid; with ack off, a refused produce stays
    silent."""
    b = Broker_(redis_url)
    await b.start()
    raw = await Raw.open(b.port)
    try:
        frames = [
            msg("cmd: produce", "mq: orders", f"msgid: r{i}", body=b"%d" % i) for i in range(5)
        ]
        frames.append(msg("cmd: produce", "mq: orders", "msgid: quiet", "ack: 0", body=b"q"))
        frames.append(msg("cmd: produce", "mq: orders", "msgid: last", body=b"l"))
        await raw.send(b"".join(frames))
        replies = [await raw.recv() for _ in range(6)]
        assert await raw.silent(0.3)
        stats = await b.engine.queue_stats("orders")
    finally:
        await raw.close()
        await b.stop()
    assert [(r.msgid, r.status) for r in replies] == [
        ("r0", 200), ("r1", 200), ("r2", 200), ("r3", 500), ("r4", 500), ("last", 500)
    ]  # fmt: skip
    assert stats.ready == 3


async def test_runs_queued_behind_a_store_are_stored_together_and_answered_apart(
    orders_bounded_at_3, redis_url
) -> None:
    """Runs read one after another while a store is under way join the line's next
    engine call; each message's outcome still reaches its own produce."""
    b = Broker_(redis_url)
    await b.start()
    pauser = redis.Redis.from_url(redis_url)
    raw = await Raw.open(b.port)

    def run(*ids: str) -> bytes:
        return b"".join(msg("cmd: produce", "mq: orders", f"msgid: {i}", body=b"x") for i in ids)

    try:
        pauser.execute_command("CLIENT", "PAUSE", 400, "WRITE")  # the first store waits
        await raw.send(run("a0", "a1"))
        await asyncio.sleep(0.1)
        await raw.send(run("b0"))
        await asyncio.sleep(0.1)
        await raw.send(run("c0", "c1"))
        replies = {r.msgid: r.status for r in [await raw.recv(5) for _ in range(5)]}
    finally:
        pauser.execute_command("CLIENT", "UNPAUSE")
        await raw.close()
        await b.stop()
    assert replies == {"a0": 200, "a1": 200, "b0": 200, "c0": 500, "c1": 500}
