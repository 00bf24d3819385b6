"""Pipeline benchmark: archive msgs/s on local[2] and on a standalone cluster.

Starts its own redis-server on a free port, fills ``--partitions`` partitions of one
archived topic with ``--messages`` 100-byte messages (100 per append call), then measures
in the same run:

* raw Redis: XRANGE over the same streams (COUNT 100, redis-py), messages/s;
* the archive job (``mqcloud`` source → Arrow batches → Parquet, Trigger.AvailableNow) on
  ``local[2]``;
* the same job on a Spark standalone master + worker (2 cores) started from PySpark.

Each Spark figure comes after a warm-up run over all the messages (the JVM's JIT makes a
first run 2-3 times as costly) and is the median of ``--runs`` runs, each archiving every
message again into a fresh directory. Each run prints its wall-clock rate, the CPU time
the whole process tree used (driver, JVMs, Python workers, Redis), the messages per CPU
second (what the code costs, whatever else runs) and how many cores the machine kept busy
meanwhile (more than 2 means other work shared them). Session and cluster start-up are
excluded.

    .venv/bin/python bench/pipeline.py [--messages 1000000] [--partitions 4] [--runs 3]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import django  # noqa: E402
import redis  # noqa: E402
import redis.asyncio as aioredis  # noqa: E402
from localservices import RedisServer, free_port  # noqa: E402

from bench.harness import cpu_times, machine_busy, tree_cpu_seconds  # noqa: E402

BODY = b"x" * 100


def fill(url: str, snapshot, topic: str, partitions: int, messages: int) -> None:
    from brokers.engine import Engine, Message

    async def main() -> None:
        client = aioredis.from_url(url)
        engine = Engine(client, lambda: snapshot)
        per = messages // partitions
        batch = [Message(BODY, business_id="b") for _ in range(100)]
        for p in range(partitions):
            for _ in range(per // 100):
                await engine.append(topic, "bench", batch, partition=p)
        await engine.close()
        await client.aclose()

    asyncio.run(main())


def raw_xrange(url: str, topic: str, partitions: int, messages: int) -> float:
    """Messages/s reading every entry of the topic's streams with XRANGE COUNT 100."""
    from brokers.engine.keys import PartitionKeys

    client = redis.Redis.from_url(url)
    started = time.perf_counter()
    for p in range(partitions):
        key, last = PartitionKeys(topic, p).stream, "-"
        while True:
            got = client.xrange(key, last, "+", count=100)
            if not got:
                break
            last = "(" + got[-1][0].decode()
    elapsed = time.perf_counter() - started
    client.close()
    return messages / elapsed


def archive_runs(spark, snapshot, url: str, workdir: Path, messages: int, runs: int) -> float:
    """Warm up, then ``runs`` timed runs of the archive job over every message; the median
    rate (each run is printed)."""
    from pipeline.archive import run_archive

    target = type(snapshot)(topics={"bench": snapshot.topics["bench"]})
    run_archive(spark, target, archive_url=str(workdir / "warm-up"), redis_url=url)
    rates = []
    for i in range(runs):
        cpu0, machine0, started = tree_cpu_seconds(), cpu_times(), time.perf_counter()
        result = run_archive(spark, target, archive_url=str(workdir / f"run{i}"), redis_url=url)
        elapsed = time.perf_counter() - started
        cpu, busy = tree_cpu_seconds() - cpu0, machine_busy(machine0, cpu_times())
        assert result.rows == messages, (result.rows, messages)
        rates.append(messages / elapsed)
        print(
            f"  run {i + 1}: {messages / elapsed:10,.0f} msg/s in {elapsed:5.1f} s;"
            f" {cpu:5.1f} CPU-s ({messages / cpu:,.0f} msg per CPU-s, {cpu / elapsed:.2f} cores);"
            f" machine busy {busy:.2f} cores",
            flush=True,
        )
    return statistics.median(rates)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    messages = args.messages - args.messages % (100 * args.partitions)

    tmp = Path(tempfile.mkdtemp(prefix="mqcloud-bench-pipeline-"))
    server = RedisServer(tmp / "redis", free_port())
    server.start()
    os.environ["REDIS_URL"] = server.url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mqcloud.settings")
    django.setup()
    from brokers.engine import CatalogSnapshot, ProducerPolicyInfo, TopicInfo
    from pipeline.session import spark_session
    from pipeline.standalone import StandaloneCluster

    snapshot = CatalogSnapshot(
        topics={"bench": TopicInfo(code="bench", partitions=args.partitions, archive=True)},
        producers=(ProducerPolicyInfo(name="bench.bench", topic="bench", app="bench"),),
    )
    try:
        fill(server.url, snapshot, "bench", args.partitions, messages)
        raw = raw_xrange(server.url, "bench", args.partitions, messages)
        print(f"{messages} messages of {len(BODY)} bytes in {args.partitions} partitions")
        print(f"raw redis XRANGE COUNT 100:      {raw:12,.0f} msg/s  (1.00)", flush=True)
        conf = {"spark.ui.showConsoleProgress": "false"}
        spark = spark_session("local[2]", "mqcloud-bench", conf=conf)
        print("archive on local[2]:")
        local = archive_runs(spark, snapshot, server.url, tmp / "local", messages, args.runs)
        spark.stop()
        print(f"archive on local[2]:             {local:12,.0f} msg/s  ({local / raw:.3f})")
        with StandaloneCluster(tmp / "spark", cores=2, memory="1g") as cluster:
            conf.update({"spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1",
                         "spark.cores.max": "2"})  # fmt: skip
            spark = spark_session(cluster.url, "mqcloud-bench-cluster", conf=conf)
            print("archive on standalone (2 cores):")
            remote = archive_runs(spark, snapshot, server.url, tmp / "cluster", messages, args.runs)
            spark.stop()
        print(f"archive on standalone (2 cores): {remote:12,.0f} msg/s  ({remote / raw:.3f})")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
