"""Reads return records one by one whatever the stored layout: the scripts hand each run
of records back as one string (``read_span``) and :func:`parse_spans` splits it — for a
read, a pull consumer's fetch and a consumer group's lease alike."""

from __future__ import annotations

import asyncio

import redis.asyncio as aioredis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from brokers.engine import BatchItem, Engine, Message
from tests.engine.conftest import snapshot

# an append: a list of messages, each a plain one (0) or a batch of k ≥ 1 items (k)
_APPENDS = st.lists(st.lists(st.integers(0, 3), min_size=1, max_size=5), min_size=1, max_size=8)


def _message(n: int, k: int) -> Message:
    if k == 0:
        return Message(f"m{n}".encode())
    return Message.batch([BatchItem(f"m{n}.{j}".encode()) for j in range(k)])


def _expected(appends: list[list[int]], start: int, count: int) -> list[tuple[int, int]]:
    """(index, items) of the records a read of ``count`` from ``start`` returns: every
    record reaching past ``start``, in order, while fewer than ``count`` items are taken."""
    out, index, taken = [], 0, 0
    for kinds in appends:
        for k in kinds:
            items = max(1, k)
            if index + items > start and taken < count:
                out.append((index, items))
                taken += items
            index += items
    return out


async def _check(redis_url: str, appends: list[list[int]], start: int, count: int) -> None:
    client = aioredis.from_url(redis_url)
    try:
        await client.flushdb()
        snap = snapshot(
            topics={"t": {"partitions": 1}},
            consumers=[{"topic": "t", "app": "a"}, {"topic": "t", "app": "b"}],
        )
        engine = Engine(client, lambda: snap)
        n = 0
        for kinds in appends:
            await engine.append(
                "t", "a", [_message(n + i, k) for i, k in enumerate(kinds)], partition=0
            )
            n += len(kinds)
        total = sum(max(1, k) for kinds in appends for k in kinds)
        start = min(start, total)
        got = await engine.read("t", 0, start, count)
        assert [(d.index, d.count) for d in got] == _expected(appends, start, count)
        for d in got:
            assert d.message.index == d.index and d.message.count == d.count
        fetched = await engine.fetch("t", "a", count=count)
        whole = _expected(appends, 0, count)
        assert [(d.index, d.count) for d in fetched.messages] == whole
        if whole:
            assert fetched.end == whole[-1][0] + whole[-1][1]
        leased = await engine.lease("t", "b", count=count, owner="o")  # another group
        items = [(index + j, 1) for index, n in whole for j in range(n)]
        assert [(d.index, d.count) for d in leased.deliveries] == items  # batches opened
        await engine.close()
    finally:
        await client.aclose()


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(appends=_APPENDS, start=st.integers(0, 40), count=st.integers(1, 12))
def test_reads_split_spans_into_the_records_a_read_covers(redis_url, appends, start, count):
    asyncio.run(_check(redis_url, appends, start, count))
