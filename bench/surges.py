"""Traffic-surge alerts at fleet size: what summing up a day and a check cost.

Starts its own PostgreSQL and Redis on free ports (scripts/localservices), migrates, and
fills the pipeline's rollup with one full UTC day of per-minute traffic for ``--topics``
topics (1,440 rows each, written with COPY), plus ``--days`` days of daily peaks per topic
and 10 recent minutes per topic, some of them surging. Then it times
:func:`mqcloud.alerts.surges.sum_up_day` over that day (one SQL statement for every topic;
a check runs it at most ``DAYS_PER_RUN`` times, and once a day after the first) and
:func:`~mqcloud.alerts.surges.find_surges` (what every 5-minute check runs), and checks
that the surging topics — and only they — were found. The raw Redis baseline (pipelined
XADD) is printed first, as in every benchmark here.

    .venv/bin/python bench/surges.py [--topics 5000] [--days 30] [--runs 5]
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

SURGING_EVERY = 100  # one topic in this many surges


def _copy(table: str, columns: str, rows: io.StringIO) -> None:
    from django.db import connection

    rows.seek(0)
    with (
        connection.cursor() as cursor,
        cursor.copy(f"COPY {table} ({columns}) FROM STDIN") as copy,
    ):
        while chunk := rows.read(1 << 20):
            copy.write(chunk)


def fill(topics: int, days: int, now: datetime) -> None:
    """The rollup day before ``now``, the peaks history and the recent minutes."""
    from mqcloud.alerts.models import TopicDailyPeak
    from pipeline.models import TrafficMinute

    traffic = TrafficMinute._meta.db_table
    columns = "dimension, name, minute, messages, bytes, latency_p50_ms, latency_p99_ms"
    day = (now - timedelta(days=1)).replace(hour=0, minute=0, second=0, microsecond=0)
    for first in range(0, topics, 500):
        buffer = io.StringIO()
        for t in range(first, min(first + 500, topics)):
            for m in range(1440):
                n = 100 + (t + m) % 50 + (5_000 if m == 600 else 0)  # one outlier a day
                at = (day + timedelta(minutes=m)).isoformat()
                buffer.write(f"topic\tt{t:05d}\t{at}\t{n}\t{n * 100}\t1\t2\n")
        _copy(traffic, columns, buffer)
    buffer = io.StringIO()
    for t in range(topics):
        for m in range(10):
            n = 2_000 if t % SURGING_EVERY == 0 and m == 5 else 120
            at = (now - timedelta(minutes=m + 1)).isoformat()
            buffer.write(f"topic\tt{t:05d}\t{at}\t{n}\t{n * 100}\t1\t2\n")
    _copy(traffic, columns, buffer)
    buffer = io.StringIO()
    for t in range(topics):
        for d in range(2, days + 1):  # the day before now is summed up by the benchmark
            buffer.write(f"t{t:05d}\t{(now - timedelta(days=d)).date()}\t{150 + d}\n")
    _copy(TopicDailyPeak._meta.db_table, "topic, day, peak", buffer)


def run(topics: int, days: int, runs: int) -> None:
    django_ready()
    from django.db import connection

    from mqcloud.alerts import surges

    now = datetime.now(UTC).replace(second=0, microsecond=0)
    started = time.perf_counter()
    fill(topics, days, now)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    rows = topics * (1440 + 10)
    print(f"{rows:,} rollup rows and {topics * (days - 1):,} daily peaks written in "
          f"{time.perf_counter() - started:.1f} s")  # fmt: skip
    yesterday = (now - timedelta(days=1)).date()
    ms, summed = timed_calls(lambda: surges.sum_up_day(yesterday), runs)
    print(f"sum_up_day, {topics} topics × 1,440 minutes: {ms:,.0f} ms (median of {runs}), "
          f"{summed} topics")  # fmt: skip
    ms, found = timed_calls(lambda: surges.find_surges(now), runs)
    expected = {f"t{t:05d}" for t in range(0, topics, SURGING_EVERY)}
    got = {s.topic for s in found}
    assert got == expected, (len(got), len(expected))
    print(f"find_surges, {topics} topics × {days} days of peaks: {ms:,.0f} ms (median of "
          f"{runs}), {len(found)} surging topics found, as planted")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--topics", type=int, default=5_000)
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    with django_services():
        run(args.topics, args.days, args.runs)


if __name__ == "__main__":
    main()
