"""What wakes a parked fetch, and what a woken fetch reads: only the partitions the
notifications named, an ack only when more is left, a retry made due at once."""

from __future__ import annotations

import asyncio

import pytest
from redis.asyncio.cluster import RedisCluster

from brokers.engine import RETRY_PARTITION, FetchStatus, Message, RetryPolicy, RetryType
from brokers.engine.keys import notify_channel
from tests.engine.conftest import snapshot


async def _evalsha_calls(store) -> int:
    """Scripts Redis ran: not those refused with NOSCRIPT (run again once loaded), which
    a Redis new to this test's scripts counts too when the test runs on its own."""
    calls = (await store.info("commandstats")).get("cmdstat_evalsha", {})
    return int(calls.get("calls", 0)) - int(calls.get("failed_calls", 0))


async def _publish_calls(store) -> int:
    """PUBLISH commands the server(s) ran, scripts' included."""
    if isinstance(store, RedisCluster):
        nodes = await store.info("commandstats", target_nodes=RedisCluster.PRIMARIES)
        stats = list(nodes.values())
    else:
        stats = [await store.info("commandstats")]
    return sum(int(s.get("cmdstat_publish", {}).get("calls", 0)) for s in stats)


async def _settle() -> None:
    for _ in range(10):
        await asyncio.sleep(0.02)


async def test_a_woken_fetch_reads_only_the_notified_partitions(make_engine, store):
    if isinstance(store, RedisCluster):
        pytest.skip("counts the commands of one server")
    engine = make_engine(snapshot(topics={"t": {"partitions": 4}}))
    task = asyncio.create_task(engine.fetch("t", "a", long_poll_ms=5000))
    await _settle()
    before = await _evalsha_calls(store)
    for _ in range(10):  # partitions this fetch does not serve (another broker's, say)
        await store.publish(notify_channel("t"), 99)
    await _settle()
    assert not task.done()
    assert await _evalsha_calls(store) == before  # woken ten times, read nothing
    await engine.append("t", "a", [Message(b"x")], partition=2)
    result = await asyncio.wait_for(task, 2)
    assert result.found and result.partition == 2
    # the append and ONE lock-and-read of partition 2 (a full look would have been more)
    assert await _evalsha_calls(store) - before == 2


async def test_an_ack_wakes_fetchers_only_when_the_partition_holds_more(make_engine, store):
    engine = make_engine(snapshot(topics={"t": {"partitions": 1}}))
    await engine.append("t", "a", [Message(b"a"), Message(b"b"), Message(b"c")], partition=0)
    async with engine.notifier.watch("t", "other") as event:
        first = await engine.fetch("t", "a", count=2, owner="c1")
        published = await _publish_calls(store)
        await engine.ack("t", "a", 0, [d.index for d in first.messages], owner="c1")
        assert await _publish_calls(store) == published + 1
        await asyncio.wait_for(event.wait(), 2)
        assert event.take() == {0}  # index 2 is still there
        last = await engine.fetch("t", "a", count=2, owner="c1")
        published = await _publish_calls(store)
        await engine.ack("t", "a", 0, [d.index for d in last.messages], owner="c1")
        # nothing left: nobody needs waking (counted at the server, so a wake-up for another
        # reason, such as a reconnect of the notification connection, cannot hide or fake it)
        assert await _publish_calls(store) == published


async def test_a_retry_made_due_wakes_a_parked_fetch(make_engine):
    engine = make_engine(
        snapshot(topics={"t": {"partitions": 1}}),
        retry_policy=RetryPolicy(base_ms=60_000, cap_ms=60_000),
    )
    await engine.append("t", "a", [Message(b"bad")], partition=0)
    got = await engine.fetch("t", "a", count=1)
    await engine.ack("t", "a", 0, [got.messages[0].index], retry_type=RetryType.EXCEPTION)
    loop = asyncio.get_running_loop()
    task = asyncio.create_task(engine.fetch("t", "a", long_poll_ms=5000))
    await _settle()
    assert not task.done()  # the retry is due in a minute
    started = loop.time()
    assert await engine.resend_retries("t", "a") == 1
    result = await asyncio.wait_for(task, 2)
    assert result.partition == RETRY_PARTITION and result.messages[0].message.body == b"bad"
    assert loop.time() - started < 2


async def test_an_empty_fetch_learns_when_the_next_retry_is_due(make_engine, clock):
    engine = make_engine(
        snapshot(topics={"t": {"partitions": 1}}),
        retry_policy=RetryPolicy(base_ms=5_000, cap_ms=5_000),
    )
    empty = await engine.fetch("t", "a")
    assert empty.status is FetchStatus.NO_NEW_MSG and empty.retry_after_ms is None
    await engine.append("t", "a", [Message(b"bad")], partition=0)
    got = await engine.fetch("t", "a", count=1)
    await engine.ack("t", "a", 0, [got.messages[0].index], retry_type=RetryType.EXCEPTION)
    later = await engine.fetch("t", "a")
    assert later.retry_after_ms == int(clock.now * 1000) + 5_000


async def test_an_empty_retry_store_is_not_asked_again_until_a_retry_is_added(
    make_engine, store, clock
):
    if isinstance(store, RedisCluster):
        pytest.skip("counts the commands of one server")
    snap = snapshot(topics={"t": {"partitions": 1}})
    engine = make_engine(snap, retry_policy=RetryPolicy(base_ms=1_000, cap_ms=1_000))
    other = make_engine(snap, retry_policy=RetryPolicy(base_ms=1_000, cap_ms=1_000))
    await engine.fetch("t", "a", long_poll_ms=50)  # subscribes to the topic's notifications
    await engine.fetch("t", "a")  # the retry store is found empty
    before = await _evalsha_calls(store)
    for _ in range(5):
        assert (await engine.fetch("t", "a")).status is FetchStatus.NO_NEW_MSG
    assert await _evalsha_calls(store) - before == 5  # one partition scan each, no lease
    # another process adds a retry: its notification makes this engine look again
    await other.append("t", "a", [Message(b"bad")], partition=0)
    got = await other.fetch("t", "a", count=1)
    await other.ack("t", "a", 0, [got.messages[0].index], retry_type=RetryType.EXCEPTION)
    await _settle()
    clock.advance(2)
    again = await engine.fetch("t", "a")
    assert again.partition == RETRY_PARTITION and again.messages[0].message.body == b"bad"


async def test_the_park_limit_is_per_app(make_engine, store):
    """Long polls park up to PARK_FACTOR per partition for each (topic, app); beyond that
    they answer at once. One app's long polls never use up another's (the limit counted
    every app's together: app b's consumers then polled in a loop)."""
    from brokers.engine.fetch import PARK_FACTOR

    engine = make_engine(
        snapshot(
            topics={"t": {"partitions": 1}},
            consumers=[{"topic": "t", "app": "a"}, {"topic": "t", "app": "b"}],
        )
    )
    limit = PARK_FACTOR
    parked = [
        asyncio.create_task(engine.fetch("t", "a", long_poll_ms=5000, owner=f"a{i}"))
        for i in range(limit)
    ]
    await _settle()
    assert engine.notifier.parked_for("t", "a") == limit and not any(t.done() for t in parked)
    over = await asyncio.wait_for(engine.fetch("t", "a", long_poll_ms=5000, owner="a-x"), 1)
    assert over.status is FetchStatus.NO_NEW_MSG  # answered at once
    other = asyncio.create_task(engine.fetch("t", "b", long_poll_ms=5000, owner="b0"))
    await _settle()
    assert not other.done() and engine.notifier.parked_for("t", "b") == 1
    assert engine.notifier.total_parked == limit + 1
    for task in [*parked, other]:
        task.cancel()
    await asyncio.gather(*parked, other, return_exceptions=True)
    assert engine.notifier.total_parked == 0 and engine.notifier.parked_for("t", "a") == 0
