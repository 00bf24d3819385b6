"""Settles Redis missed are made again once it answers (brokers.engine.kept_settles): a
Redis blip under a fleet of zbus long polls left the read-ahead returned during it
leased for the lease time (10 minutes), its pollers waiting for it all that while."""

from __future__ import annotations

import asyncio

from redis.exceptions import ConnectionError as RedisConnectionError

from brokers.engine import Message, groups, kept_settles
from tests.engine.conftest import snapshot


async def _until(check, within: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + within
    while not check():
        assert asyncio.get_running_loop().time() < deadline, "waited too long"
        await asyncio.sleep(0.01)


def _unreachable(monkeypatch) -> dict[str, bool]:
    """The settle script fails as an unreachable Redis makes it fail while ``down``."""
    real, state = groups.settle, {"down": True}

    async def settle(*args, **kwargs):
        if state["down"]:
            raise RedisConnectionError(
                "Error 111 connecting to 127.0.0.1:6379. Connection refused."
            )
        return await real(*args, **kwargs)

    monkeypatch.setattr(groups, "settle", settle)
    return state


async def test_an_ack_a_release_and_a_return_redis_missed_land_once_it_answers(
    make_engine, monkeypatch
):
    monkeypatch.setattr(kept_settles, "FIRST_RETRY_S", 0.01)
    monkeypatch.setattr(kept_settles, "LAST_RETRY_S", 0.05)
    engine = make_engine(snapshot(topics={"t": {"partitions": 1}}))
    start = engine.now_ms()
    for i in range(4):
        await engine.append("t", "a", [Message(b"%d" % i)], partition=0)
    leased = await engine.lease("t", "a", count=4, owner="o")
    assert [d.index for d in leased.deliveries] == [0, 1, 2, 3]

    async def consumed() -> int:
        rows = await engine.traffic("app", "a", start, engine.now_ms() + 1)
        return sum(r.consumed for r in rows)

    redis = _unreachable(monkeypatch)
    assert await engine.settle("t", "a", 0, [0]) == 0  # no error for the caller
    assert await engine.release("t", "a", 0, [1]) == 0
    assert await engine.return_unread("t", "a", [leased.deliveries[2]]) == 0
    assert engine.kept_settles.count == 3
    await asyncio.sleep(0.2)  # tried again meanwhile, Redis still down: all kept
    assert engine.kept_settles.count == 3
    assert (await engine.group_stats("t", "a")).in_flight == 4
    assert await consumed() == 3  # the return's traffic is given back at once

    redis["down"] = False
    await _until(lambda: engine.kept_settles.count == 0)
    assert await consumed() == 3  # and not again when it lands
    stats = await engine.group_stats("t", "a")
    assert (stats.backlog, stats.in_flight) == (3, 1)  # 0 acked; 1 and 2 due; 3 still leased
    again = []  # one run due again per lease
    while got := (await engine.lease("t", "a", count=4, owner="o")).deliveries:
        again += [(d.index, d.redelivered) for d in got]
    assert sorted(again) == [(1, True), (2, False)]
    assert await consumed() == 5  # delivered again: counted again


async def test_kept_settles_of_one_group_partition_are_made_in_one_call(make_engine, monkeypatch):
    monkeypatch.setattr(kept_settles, "FIRST_RETRY_S", 0.01)
    engine = make_engine(snapshot(topics={"t": {"partitions": 1}}))
    for i in range(5):
        await engine.append("t", "a", [Message(b"%d" % i)], partition=0)
    await engine.lease("t", "a", count=5, owner="o")
    redis = _unreachable(monkeypatch)
    for i in range(5):
        await engine.settle("t", "a", 0, [i])
    calls = []
    real = groups.settle

    async def counted(*args, **kwargs):
        calls.append(args[4])  # the runs
        return await real(*args, **kwargs)

    redis["down"] = False
    monkeypatch.setattr(groups, "settle", counted)
    await _until(lambda: engine.kept_settles.count == 0)
    assert calls == [[(0, 5)]]
    assert (await engine.group_stats("t", "a")).backlog == 0


async def test_closing_with_settles_kept_does_not_wait_for_redis(make_engine, monkeypatch):
    engine = make_engine(snapshot(topics={"t": {"partitions": 1}}))
    await engine.append("t", "a", [Message(b"x")], partition=0)
    await engine.lease("t", "a", count=1, owner="o")
    _unreachable(monkeypatch)
    await engine.release("t", "a", 0, [0])
    assert engine.kept_settles.count == 1
    await asyncio.wait_for(engine.kept_settles.close(), 2)
    await engine.release("t", "a", 0, [0])  # closed: nothing more is kept
    assert engine.kept_settles.count == 1


async def test_a_failure_that_is_not_redis_is_the_callers(make_engine):
    engine = make_engine(snapshot(topics={"t": {"partitions": 1}}))
    try:
        await engine.settle("gone", "a", 0, [0])
    except Exception as exc:  # the topic is unknown: said at once, not kept
        assert type(exc).__name__ == "TopicNotFound", exc
    else:
        raise AssertionError("a settle on an unknown topic succeeded")
    assert engine.kept_settles.count == 0
