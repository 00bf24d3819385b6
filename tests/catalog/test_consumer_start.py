"""Consumers created through the models get their start pinned in one batch per
transaction (http-mq.md §13.3): one on_commit callback, one Engine, one Redis round trip,
without reading the rest of the catalog."""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio as aioredis
from django.db import transaction
from redis.asyncio.client import Pipeline

from brokers import consumer_start, engine_run
from brokers.catalog_loader import build_snapshot
from brokers.engine import Engine, Message
from brokers.engine.offsets import SET_ACK
from brokers.models import App, ConsumerPolicy, ProducerPolicy, Team, Topic
from tests import factories


@pytest.fixture
def fleet(db):
    """50 topics (1–4 partitions; every fifth PriorityBased with 4 bands), app ``prod``
    producing to all, and consumer apps ``c0``–``c3``; partitions hold a few messages (in a
    flushed Redis)."""
    team = Team.objects.create(name="fleet")
    cluster = factories.cluster_with_brokers()
    prod, _ = factories.app("prod", team)
    topics = []
    for i in range(50):
        priority = i % 5 == 0
        partitions = 4 if priority else 1 + i % 4
        t = factories.topic(f"t{i:02d}", cluster, team, partitions, groups=1)
        if priority:
            Topic.objects.filter(pk=t.pk).update(delivery_mode=Topic.DeliveryMode.PRIORITY_BASED)
            t.refresh_from_db()
        ProducerPolicy.objects.create(topic=t, app=prod)
        topics.append(t)
    apps = [factories.app(f"c{j}", team)[0] for j in range(4)]
    produced = {t.code: [(i + p) % 3 for p in range(t.partitions)] for i, t in enumerate(topics)}
    snap = build_snapshot()

    async def fill() -> None:
        client = aioredis.from_url(_redis_url())
        engine = Engine(client, lambda: snap)
        try:
            # Redis knows the pinning script from then on (a fresh server answers the
            # first batch's pipeline NOSCRIPT and gets it again, once, after loading it)
            await client.flushall()
            await client.script_load(SET_ACK.source)
            for code, counts in produced.items():
                for p, n in enumerate(counts):
                    if n:
                        await engine.append(code, "prod", [Message(b"x")] * n, partition=p)
        finally:
            await engine.close()
            await client.aclose()

    asyncio.run(fill())
    return {"topics": topics, "apps": apps, "produced": produced}


def _redis_url() -> str:
    from django.conf import settings

    return settings.REDIS_URL


def ack_indexes(pairs: list[tuple[str, str]]) -> dict[tuple[str, str], list[int]]:
    """Each consumer's ack index per partition, as the full catalog's engine reports it."""
    snap = build_snapshot()

    async def read() -> dict[tuple[str, str], list[int]]:
        client = aioredis.from_url(_redis_url())
        engine = Engine(client, lambda: snap)
        try:
            return {(t, a): [p.ack_index for p in await engine.progress(t, a)] for t, a in pairs}
        finally:
            await engine.close()
            await client.aclose()

    return asyncio.run(read())


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Counts Engines built for pinning and pipelines executed (Redis round trips)."""
    counts = {"engines": 0, "pipelines": 0}

    class CountingEngine(Engine):
        def __init__(self, *args, **kwargs) -> None:
            counts["engines"] += 1
            super().__init__(*args, **kwargs)

    execute = Pipeline.execute

    async def counting_execute(self, *args, **kwargs):
        counts["pipelines"] += 1
        return await execute(self, *args, **kwargs)

    monkeypatch.setattr(engine_run, "Engine", CountingEngine)  # pins run there
    monkeypatch.setattr(Pipeline, "execute", counting_execute)
    monkeypatch.setattr(
        consumer_start, "build_snapshot", lambda *a: pytest.fail("full snapshot"), raising=False
    )
    return counts


def test_200_consumers_in_one_transaction_are_pinned_in_one_batch(
    fleet, counted, django_capture_on_commit_callbacks, django_assert_max_num_queries
):
    starts = ("latest", "earliest")
    expected: dict[tuple[str, str], list[int]] = {}
    broadcast: list[tuple[str, str]] = []
    with django_capture_on_commit_callbacks() as callbacks, transaction.atomic():
        for i, t in enumerate(fleet["topics"]):
            for j, app in enumerate(fleet["apps"]):
                start = starts[(i + j) % 2]
                mode = ConsumerPolicy.Mode.BROADCAST if (i, j) == (1, 3) else None
                ConsumerPolicy.objects.create(
                    topic=t, app=app, start_position=start, **({"mode": mode} if mode else {})
                )
                if mode:
                    broadcast.append((t.code, app.code))
                else:
                    ends = fleet["produced"][t.code]
                    expected[(t.code, app.code)] = ends if start == "latest" else [0] * len(ends)
    batches = [c for c in callbacks if isinstance(c, consumer_start.PinBatch)]
    assert len(batches) == 1 and len(batches[0].policy_ids) == 199  # + 1 broadcast
    with django_assert_max_num_queries(1):
        batches[0]()
    assert counted == {"engines": 1, "pipelines": 1}
    got = ack_indexes([*expected, *broadcast])
    assert {pair: got[pair] for pair in expected} == expected
    assert all(set(got[pair]) == {-1} for pair in broadcast)  # broadcast: not pinned


def test_consumers_in_savepoints_share_the_batch_and_a_rollback_drops_its_own(
    fleet, counted, django_capture_on_commit_callbacks
):
    t0, t1, t2 = fleet["topics"][1:4]
    c0 = fleet["apps"][0]
    with django_capture_on_commit_callbacks(execute=True) as callbacks, transaction.atomic():
        for t in (t0, t1):
            with transaction.atomic():
                ConsumerPolicy.objects.create(topic=t, app=c0, start_position="latest")
        with pytest.raises(RuntimeError), transaction.atomic():
            ConsumerPolicy.objects.create(topic=t2, app=c0, start_position="latest")
            raise RuntimeError("the application is withdrawn")
    assert sum(isinstance(c, consumer_start.PinBatch) for c in callbacks) == 1
    assert counted == {"engines": 1, "pipelines": 1}
    got = ack_indexes([(t0.code, "c0"), (t1.code, "c0")])
    assert got == {(t.code, "c0"): fleet["produced"][t.code] for t in (t0, t1)}
    assert not ConsumerPolicy.objects.filter(topic=t2).exists()


@pytest.mark.django_db(transaction=True)
def test_each_transaction_pins_its_own_consumers(fleet, counted):
    """Real commits: a consumer created outside a transaction, and two transactions of
    two consumers each, are all pinned once committed."""
    app = App.objects.get(code="c1")
    topics = fleet["topics"][:5]
    ConsumerPolicy.objects.create(topic=topics[0], app=app, start_position="latest")
    for pair in (topics[1:3], topics[3:5]):
        with transaction.atomic():
            for t in pair:
                ConsumerPolicy.objects.create(topic=t, app=app, start_position="latest")
    assert counted == {"engines": 3, "pipelines": 3}
    got = ack_indexes([(t.code, "c1") for t in topics])
    assert got == {(t.code, "c1"): fleet["produced"][t.code] for t in topics}
