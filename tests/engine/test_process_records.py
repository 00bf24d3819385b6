"""What the process alerts read: recorded exits (taken oldest first, each once, the last
MAX_KEPT kept) and the lapsed reports of a board (taken once; valid ones stay)."""

from __future__ import annotations

import time

import orjson

from brokers.engine import publish_report, record_exit, take_exits, take_lapsed_reports
from brokers.engine.exits import EXITS_KEY, MAX_KEPT, how_it_ended
from brokers.engine.reports import board_key


async def test_exits_are_taken_oldest_first_and_once(store):
    for pid in (1, 2, 3):
        await record_exit(store, {"service": "broker 1", "process": 1, "pid": pid})
    await store.lpush(EXITS_KEY, b"not json", b"[1]")  # unreadable: dropped
    assert [e["pid"] for e in await take_exits(store, limit=2)] == [1, 2]
    assert [e["pid"] for e in await take_exits(store)] == [3]
    assert await take_exits(store) == []


async def test_only_the_last_exits_are_kept(store):
    for pid in range(MAX_KEPT + 5):
        await record_exit(store, {"pid": pid})
    taken = await take_exits(store)
    assert len(taken) == MAX_KEPT and taken[0]["pid"] == 5 and taken[-1]["pid"] == MAX_KEPT + 4


def test_how_a_process_ended_in_words():
    assert how_it_ended(-9) == "was killed by SIGKILL"
    assert how_it_ended(1) == "exited with code 1"
    assert how_it_ended(-200) == "was killed by 200"


async def test_lapsed_reports_are_taken_once_and_valid_ones_stay(store):
    await publish_report(store, "alive", {"pid": 1}, valid_for_s=60, board="b")
    await publish_report(store, "dead", {"pid": 2}, valid_for_s=60, board="b")
    stale = orjson.dumps({"pid": 2, "valid_until": time.time() - 1})
    await store.hset(board_key("b"), "dead", stale)
    await store.hset(board_key("b"), "garbled", b"{")
    await publish_report(store, "other board", {"pid": 3}, valid_for_s=-1)
    assert await take_lapsed_reports(store, board="b") == {"dead": {"pid": 2}, "garbled": {}}
    assert await take_lapsed_reports(store, board="b") == {}
    assert set(await store.hkeys(board_key("b"))) == {b"alive"}


async def test_a_store_without_replicas_has_no_lags(make_engine):
    """Single Redis and every master of a Redis Cluster are asked (none has replicas)."""
    assert await make_engine().replica_lags() == []
