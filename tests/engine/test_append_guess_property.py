"""Hypothesis over the engine's guesses of a partition's next index
(:meth:`LogSection._append`): concurrent appends to one partition — sent to Redis in any
order, some failing before Redis ran them and some after (stored, but the caller told
it failed) — on a plain or a bounded topic, store every record at the index it carries,
give each index to one call, and once calls are sequential again the guess is right."""

from __future__ import annotations

import asyncio
import os

import redis.asyncio as aioredis
from hypothesis import given, settings
from hypothesis import strategies as st

from brokers.engine import Engine, Message, QueueSettings, StoreUnavailable
from brokers.engine.record import record_index
from brokers.engine.sections import log as log_section
from tests.engine.conftest import snapshot
from tests.redis_fixtures import require_test_session

CALL = st.tuples(
    st.integers(1, 3),  # messages in the call
    st.sampled_from(["ok", "ok", "fails before Redis", "fails after Redis"]),
    st.integers(0, 3),  # loop turns it waits before it is sent: calls overtake each other
)
ROUNDS = st.lists(st.lists(CALL, min_size=1, max_size=10), min_size=1, max_size=4)


class Lost(StoreUnavailable):
    """The test's connection failure."""


class Store:
    """Wraps the engine's append calls: each call in turn takes its delay and failure
    from ``plan``; ``guesses`` gets (guessed, got) of every call that reached Redis."""

    def __init__(self, bounded: bool) -> None:
        self.plan: list[tuple[str, int]] = []
        self.guesses: list[tuple[int, int]] = []
        self.bounded = bounded
        self.real_blob = log_section.append_blob
        self.real_bounded = log_section.append_bounded

    async def _planned(self, call):
        outcome, turns = self.plan.pop(0) if self.plan else ("ok", 0)
        for _ in range(turns):
            await asyncio.sleep(0)
        if outcome == "fails before Redis":
            raise Lost("the connection failed before the call was sent")
        got = await call()
        if outcome == "fails after Redis":
            raise Lost("the connection failed before the reply came")
        return got

    async def append_blob(self, *args, **kwargs):
        async def call():
            first = await self.real_blob(*args, **kwargs)
            self.guesses.append((kwargs["expected_first"], first))
            return first

        return await self._planned(call)

    async def append_bounded(self, *args, **kwargs):
        return await self._planned(lambda: self.real_bounded(*args, **kwargs))


async def _stored(engine: Engine) -> list[tuple[int, int]]:
    lo, hi = await engine.bounds("t", 0)
    out = []
    while lo < hi:
        got = await engine.read("t", 0, lo, count=64)
        out.extend((d.index, record_index(d.record)) for d in got)
        lo = got[-1].end
    return out


async def _scenario(rounds: list[list[tuple[int, str, int]]], bounded: bool) -> None:
    client = aioredis.from_url(os.environ["REDIS_URL"])
    await client.flushall()
    queue = QueueSettings(max_queue_size=10_000, overflow_policy="DropNewest") if bounded else None
    topic = {"partitions": 1, **({"queue": queue} if queue else {})}
    engine = Engine(client, lambda: snapshot(topics={"t": topic}))
    store = Store(bounded)
    log_section.append_blob = store.append_blob  # type: ignore[assignment]
    log_section.append_bounded = store.append_bounded  # type: ignore[assignment]
    try:
        handed: list[int] = []
        stored_at_least = 0
        for calls in rounds:
            store.plan = [(outcome, turns) for _, outcome, turns in calls]
            results = await asyncio.gather(
                *(engine.append("t", "a", [Message(b"m")] * n, partition=0) for n, _, _ in calls),
                return_exceptions=True,
            )
            for result in results:
                if isinstance(result, BaseException):
                    assert isinstance(result, Lost), result
                else:
                    handed.extend(result.indexes)
            stored_at_least += sum(n for n, outcome, _ in calls if outcome != "fails before Redis")
            stored = await _stored(engine)
            # every record carries the index it is stored at, and none is missing
            assert stored == [(i, i) for i in range(len(stored))]
            assert len(stored) == stored_at_least
            assert len(handed) == len(set(handed)) and set(handed) <= {i for i, _ in stored}
        store.guesses.clear()
        for _ in range(2):
            await engine.append("t", "a", [Message(b"quiet")], partition=0)
        if not bounded:  # sequential again: the second call guessed right
            assert store.guesses[-1][0] == store.guesses[-1][1]
        assert engine._next_seen[("t", 0)] == stored_at_least + 2
        assert engine._next_guess.get(("t", 0), stored_at_least + 2) == stored_at_least + 2
    finally:
        log_section.append_blob = store.real_blob  # type: ignore[assignment]
        log_section.append_bounded = store.real_bounded  # type: ignore[assignment]
        await engine.close()
        await client.aclose()


@settings(max_examples=60, deadline=None)
@given(rounds=ROUNDS, bounded=st.booleans())
def test_any_interleaving_stores_every_record_at_its_index(rounds, bounded):
    require_test_session()
    asyncio.run(_scenario(rounds, bounded))
