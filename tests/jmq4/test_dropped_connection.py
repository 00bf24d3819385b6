"""A closed JMQ4 connection frees its consumer's partitions at once (issue 20 item 3): the
batch it fetched and never acked goes to another consumer within a second, not after the
ack timeout, and so do the retries it fetched; a consumer that stays connected keeps its
lock until then."""

from __future__ import annotations

import asyncio
import time

import pytest

from brokers.catalog_loader import publish
from brokers.clients.jmq4 import Jmq4Client
from brokers.models import ConsumerPolicy
from brokers.protocols.jmq4 import (
    AddConsumerRequest,
    Code,
    FetchTopicMessageRequest,
    RetryType,
    TopicFetch,
)
from tests.jmq4.raw import RawClient, frame_bytes

pytestmark = pytest.mark.django_db

ACK_TIMEOUT_MS = 30_000  # the catalog's policy: far beyond what any wait below allows


def consumer(catalog) -> Jmq4Client:
    return Jmq4Client("127.0.0.1", catalog.ports[1], app="app1", token=catalog.token, timeout=5)


async def drop(client: Jmq4Client) -> None:
    """Close the client's sockets without REMOVE_CONNECTION, as a crashed process would."""
    for conn in list(client._connections.values()):
        await conn.close()


async def redelivered_within(catalog, bodies: list[bytes], seconds: float) -> float:
    """Another consumer's long poll gets ``bodies``; how long it took."""
    started = time.monotonic()
    async with consumer(catalog) as other:
        got = await other.fetch("local", long_poll_ms=int(seconds * 1000))
        took = time.monotonic() - started
        assert [m.body for m in got] == bodies, f"after {took:.2f}s"
        assert (await other.ack(got)) == {0: Code.SUCCESS}
    return took


async def test_a_closed_connection_frees_its_batch_at_once(catalog, brokers):
    bodies = [b"m%d" % i for i in range(5)]
    async with consumer(catalog) as producer:
        await producer.produce("local", bodies, partition=0)
    first = consumer(catalog)
    got = await first.fetch("local", count=10)
    assert [m.body for m in got] == bodies
    # connected and silent: the lock holds (its ack timeout is 30 s)
    async with consumer(catalog) as other:
        assert await other.fetch("local", long_poll_ms=500) == []
    parked = asyncio.create_task(redelivered_within(catalog, bodies, 5))
    await asyncio.sleep(0.3)  # the other consumer is parked in its long poll
    closed_at = time.monotonic()
    await drop(first)
    await parked
    assert time.monotonic() - closed_at < 1.0


async def test_a_fetch_cut_short_after_its_lock_was_taken_still_frees_it(
    catalog, brokers, monkeypatch
):
    """The connection drops while the fetch's reply from Redis is on its way: the lock
    exists, its token never reached the session; it is released by owner."""
    engine = brokers[1].engine
    real_fetch = engine.fetch
    locked = asyncio.Event()

    async def reply_lost_on_the_way(*args, **kwargs):
        result = await real_fetch(*args, **kwargs)
        locked.set()
        await asyncio.sleep(60)
        return result

    async with consumer(catalog) as producer:
        await producer.produce("local", [b"a", b"b"], partition=0)
    monkeypatch.setattr(engine, "fetch", reply_lost_on_the_way)
    raw = await RawClient.open(catalog.ports[1])
    await raw.login("app1", catalog.token)
    await raw.call(AddConsumerRequest(topics=("local",), app="app1"), request_id=2)
    fetch = FetchTopicMessageRequest(topics=(TopicFetch(topic="local", count=10),), app="app1")
    raw.send(frame_bytes(fetch, 3))
    await asyncio.wait_for(locked.wait(), 5)
    monkeypatch.setattr(engine, "fetch", real_fetch)
    closed_at = time.monotonic()
    await raw.close()
    await redelivered_within(catalog, [b"a", b"b"], 5)
    assert time.monotonic() - closed_at < 1.0


@pytest.fixture
def broadcast_catalog(catalog):
    """The catalog with app1 consuming ``local`` in broadcast mode (before the brokers
    start, so they load it)."""
    ConsumerPolicy.objects.filter(topic__code="local", app__code="app1").update(
        mode=ConsumerPolicy.Mode.BROADCAST
    )
    publish()
    return catalog


async def test_a_broadcast_consumer_frees_its_own_progress(broadcast_catalog, brokers):
    """Broadcast progress is per client address: the release finds that lock, not the
    app's clustering one."""
    catalog = broadcast_catalog
    first = consumer(catalog)
    assert await first.fetch("local") == []  # a broadcast client starts at the end
    async with consumer(catalog) as producer:
        await producer.produce("local", [b"x"], partition=0)
    assert [m.body for m in await first.fetch("local")] == [b"x"]
    async with consumer(catalog) as other:  # same address: same progress, locked
        assert await other.fetch("local", long_poll_ms=300) == []
    closed_at = time.monotonic()
    await drop(first)
    await redelivered_within(catalog, [b"x"], 5)
    assert time.monotonic() - closed_at < 1.0


async def test_a_closed_connection_hands_back_its_fetched_retries_at_once(catalog, brokers):
    """A retry (partition 32767) fetched and never acked goes back as a batch does: at
    once, not after the 30 s lease."""
    async with consumer(catalog) as producer:
        await producer.produce("local", [b"r"], partition=0)
    first = consumer(catalog)
    got = await first.fetch("local", count=10)
    assert await first.ack(got, RetryType.EXCEPTION) == {0: Code.SUCCESS}
    retried: list = []
    deadline = time.monotonic() + 5
    while not retried and time.monotonic() < deadline:  # due after the retry backoff
        retried = await first.fetch("local", long_poll_ms=1500)
    assert [(m.partition, m.body) for m in retried] == [(32767, b"r")]
    async with consumer(catalog) as other:
        assert await other.fetch("local", long_poll_ms=500) == []  # leased to first
    closed_at = time.monotonic()
    await drop(first)
    async with consumer(catalog) as other:
        again = await other.fetch("local", long_poll_ms=3000)
        assert [(m.partition, m.body) for m in again] == [(32767, b"r")]
        assert time.monotonic() - closed_at < 2.0
        assert await other.ack(again) == {32767: Code.SUCCESS}
