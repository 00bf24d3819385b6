"""``manage.py migratedelivery``: the old queue-only store moves into consumer groups and
nothing stored and unacknowledged is lost."""

from __future__ import annotations

import asyncio

import pytest
import redis
from django.core.management import call_command

from brokers.catalog_loader import build_snapshot, publish
from brokers.engine import Engine, Message
from brokers.models import ConsumerPolicy, ProducerPolicy, Team, Topic
from tests import factories

pytestmark = pytest.mark.django_db(transaction=True)


def _catalog():
    team = Team.objects.create(name="team1")
    cluster = factories.cluster_with_brokers(brokers=1)
    q = factories.topic("jobs", cluster, team, partitions=1, groups=1)
    fan = factories.topic("feed", cluster, team, partitions=1, groups=1)
    Topic.objects.filter(code="feed").update(delivery_mode="FanOutWithAck")
    app, _ = factories.app("worker", team)
    for topic in (q, fan):
        ProducerPolicy.objects.create(topic=topic, app=app)
        ConsumerPolicy.objects.create(topic=topic, app=app, start_position="earliest")
    publish()
    return build_snapshot()


async def _old_store(engine: Engine, client) -> None:
    """What the pre-issue-17 store left behind: 8 messages of jobs (0, 1 acked; 2, 3 ready;
    4 in flight on its 2nd attempt; 5 waiting for a retry; 6 acked; 7 dead pending), and
    feed's copies: durable s1 holds 1 and 2, a connection-bound one holds 2."""
    for i in range(8):
        await engine.append("jobs", "worker", [Message(b"j%d" % i)])
    for i in range(4):
        await engine.append("feed", "worker", [Message(b"f%d" % i)])
    jobs = "mq:{t:jobs:0}"
    await client.zadd(f"{jobs}:qr", {"2": 2, "3": 3})
    await client.zadd(f"{jobs}:qf", {"4": 10**13})
    await client.zadd(f"{jobs}:qd", {"5": 10**13})
    await client.hset(f"{jobs}:qa", mapping={"4": 2, "5": 1})
    await client.zadd(f"{jobs}:qx", {"7|3|MaxRetriesExceeded": 7})
    feed = "mq:{f:feed}"
    await client.sadd(f"{feed}:k", "worker#s1", "worker#~abc")
    await client.zadd(f"{feed}:r:worker#s1", {"1": 1})
    await client.zadd(f"{feed}:f:worker#s1", {"2": 10**13})
    await client.hset(f"{feed}:a:worker#s1", mapping={"1": 0, "2": 1})
    await client.zadd(f"{feed}:r:worker#~abc", {"2": 2})
    await client.sadd("zbus:redelivered:{jobs}", "4")


def _migrate() -> None:
    from django.db import connection

    try:
        call_command("migratedelivery")
    finally:
        connection.close()  # the command ran in this worker thread


def test_old_queue_progress_moves_into_the_groups(redis_url):
    snapshot = _catalog()
    redis.Redis.from_url(redis_url).flushall()

    async def scenario() -> None:
        import redis.asyncio as aioredis

        client = aioredis.from_url(redis_url)
        engine = Engine(client, lambda: snapshot)
        try:
            await _old_store(engine, client)
            await asyncio.to_thread(_migrate)
            seen = set()
            while got := (await engine.lease("jobs", "worker", count=20, owner="t")).deliveries:
                seen |= {(d.message.body, d.redelivered) for d in got}
            assert seen == {
                (b"j2", False),
                (b"j3", False),
                (b"j4", True),
                (b"j5", True),
            }
            [dead] = await engine.dead_letters("jobs", "worker")
            assert dead.message.body == b"j7" and dead.reason == "MaxRetriesExceeded"
            await engine.join("feed", "worker", "s1")
            copies = []
            while got := (
                await engine.lease("feed", "worker", count=9, owner="s", client_id="s1")
            ).deliveries:
                copies += got
            assert [(d.message.body, d.redelivered) for d in copies] == [
                (b"f1", False),
                (b"f2", True),
            ]
            await engine.join("feed", "worker", "new")  # what was fanned out is not its
            assert (
                await engine.lease("feed", "worker", count=9, owner="n", client_id="new")
            ).deliveries == []
            leftovers = [k async for k in client.scan_iter(match="mq:{t:jobs:0}:q*")]
            leftovers += [k async for k in client.scan_iter(match="mq:{f:feed}*")]
            leftovers += [k async for k in client.scan_iter(match="zbus:redelivered:*")]
            assert leftovers == []
        finally:
            await engine.close()
            await client.aclose()

    asyncio.run(scenario())
    from io import StringIO

    out = StringIO()
    call_command("migratedelivery", stdout=out)  # idempotent: nothing left to move
    assert "nothing to migrate" in out.getvalue()
