"""Traffic-silence alerts and topic traffic rules at fleet size: what one check costs.

Starts its own PostgreSQL and Redis on free ports (scripts/localservices), migrates,
creates ``--topics`` topics with a silence alert (a mix of 10, 30 and 60 minutes), each
produced to by one app, and publishes the catalog, then produces one message to every
other topic through the engine (so its produce counters hold this minute's traffic). It
times what every one-minute check runs before alerting —
:func:`mqcloud.alerts.silence.watched_topics` and
:func:`~mqcloud.alerts.silence.silent_topics` — and checks that exactly the topics
without traffic were found. Then it gives every topic one traffic rule (count in 5
minutes, change against the hour before, count in a day, in turn) and times what the
rules check reads — :func:`mqcloud.alerts.rules.due_rules` and
:func:`~mqcloud.alerts.rules.measure` — checking that the rules matched as planted. The
raw Redis baseline (pipelined XADD) is printed first, as in every benchmark here.

    .venv/bin/python bench/traffic_alerts.py [--topics 5000] [--runs 5]
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.harness import django_ready, django_services, timed_calls  # noqa: E402

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
    django_ready()

    from mqcloud.alerts import silence

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
    time_rules(topics, runs, now)


RULES = (("count_5m", "lt", 1), ("ratio_1h", "gt", 100), ("count_1d", "gte", 1))
"""(operand, operator, threshold) of topic t, by t % 3: matched, as produced to every
other topic this minute, by the odd topics' count_5m, no ratio_1h (no hour before), and
the even topics' count_1d."""


def time_rules(topics: int, runs: int, now: datetime) -> None:
    from datetime import timedelta

    from brokers.models import Topic
    from mqcloud.alerts import rules
    from mqcloud.alerts.models import TrafficRule

    by_code = dict(Topic.objects.values_list("code", "pk"))
    TrafficRule.objects.bulk_create(
        TrafficRule(
            topic_id=by_code[f"t{t:05d}"],
            operand=RULES[t % 3][0],
            operator=RULES[t % 3][1],
            threshold=RULES[t % 3][2],
        )
        for t in range(topics)
    )
    later = now + timedelta(minutes=1)  # this minute's messages are a whole minute ago
    ms, due = timed_calls(lambda: rules.due_rules(later), runs)
    print(f"due_rules, {topics:,} rules: {ms:,.0f} ms (median of {runs})")
    later_ms = int(later.timestamp() * 1000)
    ms, matches = timed_calls(lambda: rules.measure(due, later_ms), runs)
    expected = {
        f"t{t:05d}"
        for t in range(topics)
        if (t % 3 == 0 and t % 2 == 1) or (t % 3 == 2 and t % 2 == 0)
    }
    assert {m.rule.topic.code for m in matches} == expected, (len(matches), len(expected))
    print(f"measure, {topics:,} rules of 3 spans: {ms:,.0f} ms (median of {runs}), "
          f"{len(matches):,} rules matched, as planted")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--topics", type=int, default=5_000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    with django_services():
        run(args.topics, args.runs)


if __name__ == "__main__":
    main()
