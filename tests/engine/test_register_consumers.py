"""Registering many consumers at once (``Engine.register_consumers``): every partition of
every consumer pinned in one pipelined round trip, exactly as one ``register_consumer``
per consumer would pin it."""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio as aioredis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from redis.asyncio.cluster import RedisCluster

from brokers.engine import ConsumerNotFound, Engine, Message, QueueSettings, TopicNotFound
from tests.engine.conftest import snapshot

PRIORITY = QueueSettings(delivery_mode="PriorityBased")


def fleet_snapshot(partitions: dict[str, int], apps: tuple[str, ...] = ("a", "b")) -> object:
    """Topics of the given partition counts (those named ``p…`` PriorityBased); app
    ``prod`` produces to all, every app of ``apps`` consumes all."""
    topics = {
        code: {"partitions": n, **({"queue": PRIORITY} if code.startswith("p") else {})}
        for code, n in partitions.items()
    }
    return snapshot(
        topics=topics,
        producers=[{"topic": c, "app": "prod"} for c in topics],
        consumers=[{"topic": c, "app": app} for c in topics for app in apps],
    )


async def fill(engine: Engine, topic: str, counts: list[int]) -> None:
    for partition, n in enumerate(counts):
        if n:
            msgs = [Message(b"m%d" % i) for i in range(n)]
            await engine.append(topic, "prod", msgs, partition=partition)


def counting_pipelines(store, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the pipelines ``store`` executes (each is one round trip per node)."""
    executed: list[int] = []
    make = store.pipeline

    def pipeline(*args, **kwargs):
        pipe = make(*args, **kwargs)
        run = pipe.execute

        async def execute(*a, **kw):
            executed.append(len(pipe))
            return await run(*a, **kw)

        pipe.execute = execute
        return pipe

    monkeypatch.setattr(store, "pipeline", pipeline)
    return executed


async def test_a_batch_pins_every_partition_in_one_round_trip(make_engine, store, monkeypatch):
    engine = make_engine(fleet_snapshot({"t": 2, "p": 4}))
    await fill(engine, "t", [3, 0])
    await fill(engine, "p", [1, 2, 0, 5])  # priority bands are partitions, each pinned
    await engine.register_consumer("t", "b", start="earliest")  # pinned before: kept
    await fill(engine, "t", [0, 4])
    executed = counting_pipelines(store, monkeypatch)
    pinned = await engine.register_consumers(
        [("t", "a", "latest"), ("p", "a", "latest"), ("t", "b", "latest"), ("p", "b", "earliest")]
    )
    # 2 + 4 + 2 + 4 partitions in one pipeline; a cluster node that had never run the
    # script yet answers NOSCRIPT for its share, which alone is sent again once loaded
    assert executed[0] == 12 and sum(executed[1:]) < 12
    if not isinstance(store, RedisCluster):
        assert executed == [12]
    assert pinned == {
        ("t", "a"): {0: 3, 1: 4},
        ("p", "a"): {0: 1, 1: 2, 2: 0, 3: 5},
        ("t", "b"): {0: 0, 1: 0},
        ("p", "b"): {0: 0, 1: 0, 2: 0, 3: 0},
    }
    assert [p.ack_index for p in await engine.progress("p", "a")] == [1, 2, 0, 5]


async def test_a_batch_with_an_unknown_consumer_writes_nothing(make_engine):
    engine = make_engine(fleet_snapshot({"t": 2}))
    with pytest.raises(ConsumerNotFound):
        await engine.register_consumers([("t", "a", "latest"), ("t", "stranger", "latest")])
    with pytest.raises(TopicNotFound):
        await engine.register_consumers([("t", "a", "latest"), ("nope", "a", "latest")])
    assert [p.ack_index for p in await engine.progress("t", "a")] == [-1, -1]
    assert await engine.register_consumers([]) == {}


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    topics=st.dictionaries(
        st.sampled_from(["t1", "t2", "p1", "p2"]),
        st.lists(st.integers(0, 4), min_size=1, max_size=4),
        min_size=1,
    ),
    starts=st.lists(st.sampled_from(["latest", "earliest"]), min_size=4, max_size=4),
    pinned_before=st.sets(st.sampled_from(["t1", "t2", "p1", "p2"])),
)
def test_a_batch_pins_as_one_registration_per_consumer(redis_url, topics, starts, pinned_before):
    """Batch app ``a`` and one-by-one app ``b`` on the same partitions end at the same
    ack indexes; a consumer pinned before keeps its position in both."""

    async def scenario() -> tuple[dict, dict]:
        client = aioredis.from_url(redis_url)
        await client.flushall()
        snap = fleet_snapshot({code: len(counts) for code, counts in topics.items()})
        engine = Engine(client, lambda: snap)
        try:
            for code, counts in topics.items():
                await fill(engine, code, counts)
            for code in pinned_before & topics.keys():
                for app in ("a", "b"):
                    await engine.register_consumer(code, app, start="earliest")
                await fill(engine, code, [1] * len(topics[code]))
            entries = [(code, starts[i]) for i, code in enumerate(sorted(topics))]
            batch = await engine.register_consumers([(c, "a", s) for c, s in entries])
            single = {(c, "b"): await engine.register_consumer(c, "b", start=s) for c, s in entries}
            return batch, single
        finally:
            await engine.close()
            await client.aclose()

    batch, single = asyncio.run(scenario())
    assert {topic: pins for (topic, _), pins in batch.items()} == {
        topic: pins for (topic, _), pins in single.items()
    }
