"""The rollup job: per-minute traffic and consumer lag match what was produced."""

from __future__ import annotations

import datetime as dt

import pytest
from django.core.management import call_command
from django.utils import timezone

from brokers.engine import Message
from brokers.models import ConsumerPolicy
from pipeline import jobs
from pipeline.models import ConsumerLag, JobRun, TrafficMinute
from tests.pipeline.conftest import Store

pytestmark = pytest.mark.django_db

BASE = dt.datetime(2026, 11, 20, 10, 0, tzinfo=dt.UTC)
BASE_MS = int(BASE.timestamp() * 1000)


class Clock:
    """Engine clock the test moves (seconds)."""

    def __init__(self, ms: int) -> None:
        self.ms = ms

    def __call__(self) -> float:
        return self.ms / 1000


def produce_with_latency(store: Store, clock: Clock, topic: str, app: str, partition: int,
                         latencies: list[int], body_size: int) -> None:  # fmt: skip
    """One message per latency (ms between its send time and its store time)."""

    async def work(engine):
        for lat in latencies:
            msg = Message(b"x" * body_size, business_id="b", send_time_ms=clock.ms - lat)
            await engine.append(topic, app, [msg], partition=partition)

    store.run(work)


def traffic(dimension: str, name: str) -> list[tuple]:
    return [
        (t.minute, t.messages, t.bytes, t.latency_p50_ms, t.latency_p99_ms)
        for t in TrafficMinute.objects.filter(dimension=dimension, name=name).order_by("minute")
    ]


def test_rollup_matches_production(spark, catalog, store, settings):
    clock = Clock(BASE_MS + 5_000)  # 10:00:05
    timed = Store(store.redis_url, catalog, clock)
    # orders: partition 0 led by broker 1, partition 2 by broker 2 (two groups)
    leader = catalog.topics["orders"].leader_of
    assert leader(0) != leader(2)
    produce_with_latency(timed, clock, "orders", "shop", 0, list(range(1, 101)), 10)
    clock.ms = BASE_MS + 65_000  # 10:01:05
    produce_with_latency(timed, clock, "orders", "shop", 2, [7] * 20, 3)
    produce_with_latency(timed, clock, "clicks", "web", 1, [2, 4], 100)
    clock.ms = BASE_MS + 185_000  # 10:03:05: outside the rolled-up window
    produce_with_latency(timed, clock, "orders", "shop", 1, [1], 1)

    minute0, minute1 = BASE, BASE + dt.timedelta(minutes=1)
    result = jobs.rollup(since=BASE, until=BASE + dt.timedelta(minutes=2), spark=spark)

    assert traffic("topic", "orders") == [(minute0, 100, 1000, 50, 99), (minute1, 20, 60, 7, 7)]
    assert traffic("topic", "clicks") == [(minute1, 2, 200, 2, 4)]
    assert traffic("app", "shop") == [(minute0, 100, 1000, 50, 99), (minute1, 20, 60, 7, 7)]
    assert traffic("app", "web") == [(minute1, 2, 200, 2, 4)]
    b0, b2 = str(leader(0)), str(leader(2))
    by_broker = {
        b: traffic("broker", b) for b in {b0, b2, str(catalog.topics["clicks"].leader_of(1))}
    }
    assert by_broker[b0][0] == (minute0, 100, 1000, 50, 99)
    assert sum(row[1] for rows in by_broker.values() for row in rows) == 122

    # the consumer of orders never fetched: its lag is every message of orders
    lag = ConsumerLag.objects.get(topic="orders", app="billing")
    assert lag.lag == 121
    assert (
        result.traffic_rows
        == TrafficMinute.objects.count()
        == 6 + len([r for rows in by_broker.values() for r in rows])
    )
    run = JobRun.last("rollup")
    assert (run.status, run.rows) == ("ok", result.rows)

    # a second run over the same window upserts the same numbers; old rows expire
    TrafficMinute.objects.create(
        dimension="topic", name="old", minute=timezone.now() - dt.timedelta(days=31),
        messages=1, bytes=1, latency_p50_ms=0, latency_p99_ms=0,
    )  # fmt: skip
    call_command(
        "pipeline", "rollup", "--since", BASE.isoformat(), "--until", str(BASE_MS + 120_000)
    )
    assert traffic("topic", "orders") == [(minute0, 100, 1000, 50, 99), (minute1, 20, 60, 7, 7)]
    assert not TrafficMinute.objects.filter(name="old").exists()
    assert JobRun.objects.filter(job="rollup", status="ok").count() == 2


def test_the_long_lived_pipeline_rolls_up_in_its_session_only_after_changes(
    spark, catalog, store, settings
):
    """The schedule the continuous archive runs: a Spark job in the session it is given
    when something was appended, none (only lag samples) when nothing was."""
    store.produce("orders", "shop", 3, 2)
    tick = jobs.rollup_schedule(spark)
    first = tick()
    assert first is not None and first.ran
    assert JobRun.objects.filter(job="rollup").count() == 1
    assert TrafficMinute.objects.filter(dimension="topic", name="orders").exists()

    tick.next_at = 0  # due again, nothing appended
    idle = tick()
    assert idle is not None and not idle.ran and idle.lag_samples == 1
    assert JobRun.objects.filter(job="rollup").count() == 1  # no Spark job, no run

    store.produce("orders", "shop", 3, 1, start=2)
    tick.next_at = 0
    assert tick().ran
    assert JobRun.objects.filter(job="rollup").count() == 2
    assert (
        sum(t.messages for t in TrafficMinute.objects.filter(dimension="topic", name="orders")) == 9
    )


def test_lag_samples_are_the_lists_lags_broadcast_consumers_included(store, redis_url):
    """Every consumer is sampled as the console's lists show it — a broadcast consumer by
    its slowest client (it was left out, so its lag history stayed empty) — in a fixed
    number of round trips per chunk of consumers, not one per consumer."""
    from brokers.catalog_loader import build_snapshot
    from brokers.models import App, Topic
    from pipeline import rollup

    ConsumerPolicy.objects.create(
        name="web.clicks",
        topic=Topic.objects.get(code="clicks"),
        app=App.objects.get(code="web"),
        mode=ConsumerPolicy.Mode.BROADCAST,
        start_position="earliest",
    )
    snapshot = build_snapshot()
    store.catalog = snapshot
    store.produce("orders", "shop", 3, 2)
    store.produce("clicks", "web", 2, 3)

    async def consume(engine) -> None:
        for client_id, acked in (("a", 6), ("b", 1)):
            done = 0
            for _ in (0, 1):
                got = await engine.fetch(
                    "clicks", "web", count=10, owner=client_id, client_id=client_id
                )
                indexes = [d.index for d in got.messages][: max(0, acked - done)]
                done += len(indexes)
                if indexes:
                    await engine.ack("clicks", "web", got.partition, indexes, client_id=client_id)

    store.run(consume)
    rollup.LAG_CHUNK, before = 1, rollup.LAG_CHUNK  # two chunks
    try:
        samples = rollup.consumer_lag(snapshot, BASE_MS, redis_url)
    finally:
        rollup.LAG_CHUNK = before
    assert sorted((s.topic, s.app, s.lag) for s in samples) == [
        ("clicks", "web", 5),
        ("orders", "billing", 6),
    ]
