"""The daily capacity report at fleet size: what making one costs.

Starts its own PostgreSQL and Redis on free ports (scripts/localservices), migrates,
builds a fleet of ``--topics`` topics of 4 partitions (``tests/fleet.py``), gives every
partition stored bounds in Redis (as if messages had been produced and partly trimmed),
and fills the pipeline's rollup with one full UTC day of per-minute traffic per topic
(1,440 rows each, COPY), and the engine's day totals of the same traffic (the
``day:<field>`` counters the engine keeps as it counts). Then it times
:func:`mqcloud.console.capacity.build` for that day — the store's memory, the messages
stored per topic (pipelined bounds reads) and the day's traffic per cluster (the engine's
day totals) — and, apart, the engine's ``stored_messages`` and ``day_traffic`` alone and
the rollups' SQL aggregate (what the report reads for a day without engine totals), and
checks the totals against what was planted. The raw Redis baseline (pipelined XADD) is
printed first, as in every benchmark here.

    .venv/bin/python bench/capacity.py [--topics 5000] [--runs 5]
"""

from __future__ import annotations

import argparse
import io
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.harness import django_ready, django_services, timed_calls  # noqa: E402

PARTITIONS = 4


def plant_bounds(topics: int) -> int:
    """Every partition of the fleet gets ``min``/``next`` bounds; the total stored."""
    import redis
    from django.conf import settings

    from brokers.engine.keys import PartitionKeys

    client = redis.Redis.from_url(settings.REDIS_URL)
    total = 0
    pipe = client.pipeline(transaction=False)
    for t in range(topics):
        for p in range(PARTITIONS):
            lo, hi = t % 7, t % 7 + 10 + p
            total += hi - lo
            pipe.hset(PartitionKeys(f"t{t:05d}", p).meta, mapping={"min": lo, "next": hi})
        if t % 1000 == 999:
            pipe.execute()
    pipe.execute()
    return total


def plant_day_totals(topics: int, day: datetime) -> int:
    """The engine's day totals of :func:`fill_rollup`'s traffic; the total of messages."""
    import redis
    from django.conf import settings

    from brokers.engine.counters import DAY
    from brokers.engine.keys import counter_key

    client = redis.Redis.from_url(settings.REDIS_URL)
    total = 0
    pipe = client.pipeline(transaction=False)
    for t in range(topics):
        n = sum(1 + (t + m) % 5 for m in range(1440))
        total += n
        key = counter_key("topic", f"t{t:05d}", f"{day:%Y%m%d}")
        pipe.hset(key, mapping={f"{DAY}:p": n, f"{DAY}:pb": n * 100})
        if t % 1000 == 999:
            pipe.execute()
    pipe.execute()
    return total


def fill_rollup(topics: int, day: datetime) -> int:
    """One UTC day of per-minute topic traffic; the total of messages."""
    from django.db import connection

    from pipeline.models import TrafficMinute

    columns = "dimension, name, minute, messages, bytes, latency_p50_ms, latency_p99_ms"
    total = 0
    for first in range(0, topics, 500):
        buffer = io.StringIO()
        for t in range(first, min(first + 500, topics)):
            for m in range(1440):
                n = 1 + (t + m) % 5
                total += n
                at = (day + timedelta(minutes=m)).isoformat()
                buffer.write(f"topic\tt{t:05d}\t{at}\t{n}\t{n * 100}\t1\t2\n")
        buffer.seek(0)
        with (
            connection.cursor() as cursor,
            cursor.copy(f"COPY {TrafficMinute._meta.db_table} ({columns}) FROM STDIN") as copy,
        ):
            while chunk := buffer.read(1 << 20):
                copy.write(chunk)
    return total


def run(topics: int, runs: int) -> None:
    django_ready()
    from django.db import connection

    from brokers.models import Topic
    from mqcloud.console import capacity, engine_calls
    from tests.fleet import build_fleet

    started = time.perf_counter()
    build_fleet(topics)
    Topic.objects.update(partitions=PARTITIONS)
    stored = plant_bounds(topics)
    day = (datetime.now(UTC) - timedelta(days=1)).replace(hour=0, minute=0, second=0, microsecond=0)
    produced = fill_rollup(topics, day)
    assert plant_day_totals(topics, day) == produced
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    print(f"{topics:,} topics × {PARTITIONS} partitions and {topics * 1440:,} rollup rows "
          f"written in {time.perf_counter() - started:.1f} s")  # fmt: skip
    pairs = [(f"t{t:05d}", PARTITIONS) for t in range(topics)]
    ms, counted = timed_calls(
        lambda: engine_calls.run(lambda engine: engine.stored_messages(pairs)), runs
    )
    assert sum(counted.values()) == stored, (sum(counted.values()), stored)
    print(f"engine stored_messages, {topics * PARTITIONS:,} partitions: {ms:,.0f} ms "
          f"(median of {runs})")  # fmt: skip
    codes = [code for code, _ in pairs]
    key = f"{day:%Y%m%d}"
    ms, totals = timed_calls(
        lambda: engine_calls.run(lambda engine: engine.day_traffic("topic", codes, key)), runs
    )
    assert sum(t.produced for t in totals.values()) == produced
    print(f"engine day_traffic, {topics:,} topics: {ms:,.0f} ms (median of {runs})")
    ms, rolled = timed_calls(lambda: capacity.rolled_up_traffic(day.date()), runs)
    assert sum(n for n, _ in rolled.values()) == produced
    print(f"rollup aggregate (a day without engine totals), {topics:,} topics: {ms:,.0f} ms "
          f"(median of {runs})")  # fmt: skip
    ms, report = timed_calls(lambda: capacity.build(day.date()), runs)
    got = sum(c["stored_messages"] for c in report.clusters)
    made = sum(c["produced_messages"] for c in report.clusters)
    assert (got, made) == (stored, produced), ((got, made), (stored, produced))
    print(f"capacity report of {topics:,} topics (store, stored, a day of traffic): "
          f"{ms:,.0f} ms (median of {runs}); {got:,} stored and {made:,} produced, "
          f"as planted")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--topics", type=int, default=5_000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    with django_services():
        run(args.topics, args.runs)


if __name__ == "__main__":
    main()
