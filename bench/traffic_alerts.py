"""Traffic-silence alerts at fleet size: what one check's detection costs.

Starts its own PostgreSQL and Redis on free ports (scripts/localservices), migrates,
creates ``--topics`` topics with a silence alert (a mix of 10, 30 and 60 minutes), each
produced to by one app, and publishes the catalog, then produces one message to every other topic through the
engine (so its produce counters hold this minute's traffic). It times what every
one-minute check runs before alerting — :func:`mqcloud.alerts.silence.watched_topics`
and :func:`~mqcloud.alerts.silence.silent_topics` — and checks that exactly the topics
without traffic were found. The raw Redis baseline (pipelined XADD) is printed first, as
in every benchmark here.

    .venv/bin/python bench/silence.py [--topics 5000] [--runs 5]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.harness import django_services, timed_calls  # noqa: E402

WINDOWS = (10, 30, 60)


def fill(topics: int) -> None:
    """The topics (one partition each, created long ago) and the published catalog."""
    from brokers.catalog_loader import publish
    from brokers.models import App, Broker, Cluster, PartitionGroup, ProducerPolicy, Team, Topic

    team = Team.objects.create(name="fleet")
    cluster = Cluster.objects.create(name="fleet")
    broker = Broker.objects.create(
        id=1,
        cluster=cluster,
        host="127.0.0.1",
        jmq4_port=50001,
        zbus_port=51001,
        vibemq_port=52001,
        status=Broker.Status.UP,
    )
    rows = Topic.objects.bulk_create(
        Topic(
            code=f"t{t:05d}",
            cluster=cluster,
            team=team,
            partitions=1,
            silence_alert_minutes=WINDOWS[t % len(WINDOWS)],
        )
        for t in range(topics)
    )
    Topic.objects.update(created_at=datetime(2026, 1, 1, tzinfo=UTC))
    PartitionGroup.objects.bulk_create(
        PartitionGroup(topic=t, group_id=0, leader=broker, partitions=[0]) for t in rows
    )
    maker = App.objects.create(code="maker", team=team)
    ProducerPolicy.objects.bulk_create(
        ProducerPolicy(topic=t, app=maker, name=f"maker.{t.code}") for t in rows
    )
    publish()


def produce_to_every_other(topics: int) -> None:
    """One message to each even topic through the engine, as app ``maker``."""
    from brokers.engine import Message
    from mqcloud.engine_access import run_in_session

    async def produce(engine) -> None:
        for t in range(0, topics, 2):
            await engine.append(f"t{t:05d}", "maker", [Message(b"x")])
        await engine.counters.flush()

    run_in_session(produce)


def run(topics: int, runs: int) -> None:
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mqcloud.settings")
    django.setup()
    from django.core.management import call_command

    from mqcloud.alerts import silence

    call_command("migrate", verbosity=0)
    started = time.perf_counter()
    fill(topics)
    produce_to_every_other(topics)
    print(f"{topics:,} topics with a silence alert, every other one produced to, ready in "
          f"{time.perf_counter() - started:.1f} s")  # fmt: skip
    now = datetime.now(UTC)
    ms, watched = timed_calls(lambda: silence.watched_topics(now), runs)
    print(f"watched_topics, {topics:,} topics: {ms:,.0f} ms (median of {runs})")
    now_ms = int(now.timestamp() * 1000)
    ms, silent = timed_calls(lambda: silence.silent_topics(watched, now_ms), runs)
    expected = {f"t{t:05d}" for t in range(1, topics, 2)}
    assert {t.code for t in silent} == expected, (len(silent), len(expected))
    print(f"silent_topics, {topics:,} topics in {len(WINDOWS)} windows: {ms:,.0f} ms (median "
          f"of {runs}), {len(silent):,} silent topics found, as planted")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--topics", type=int, default=5_000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    with django_services():
        run(args.topics, args.runs)


if __name__ == "__main__":
    main()
