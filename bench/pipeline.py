"""Pipeline benchmark: archive msgs/s on local[2] and on a standalone cluster.

Starts its own redis-server on a free port, fills ``--partitions`` partitions of one
archived topic with ``--messages`` 100-byte messages (100 per append call), then measures
in the same run:

* raw Redis: XRANGE over the same streams (COUNT 100, redis-py), messages/s;
* the archive job (``mqcloud`` source → Parquet, availableNow) on ``local[2]``;
* the same job on a Spark standalone master + worker (2 cores) started from PySpark.

Each figure is printed with its ratio to the raw XRANGE figure. Session start-up and
cluster start-up are excluded; the first query of each session is a warm-up on a small
topic.

    .venv/bin/python bench/pipeline.py [--messages 200000] [--partitions 4]
"""

from __future__ import annotations

import argparse
import asyncio
import os
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
                await engine.append(topic, "bench", batch, partition=p, check_policy=False)
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


def archive_rate(spark, snapshot, url: str, workdir: Path, messages: int) -> float:
    from pipeline.archive import run_archive

    warm = {**snapshot.topics}
    warm_snap = type(snapshot)(topics={"warm": warm["warm"]})
    run_archive(spark, warm_snap, archive_url=str(workdir / "warm"), redis_url=url)
    target = type(snapshot)(topics={"bench": warm["bench"]})
    started = time.perf_counter()
    result = run_archive(spark, target, archive_url=str(workdir / "out"), redis_url=url)
    elapsed = time.perf_counter() - started
    assert result.rows == messages, (result.rows, messages)
    return messages / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--partitions", type=int, default=4)
    args = parser.parse_args()
    messages = args.messages - args.messages % (100 * args.partitions)

    tmp = Path(tempfile.mkdtemp(prefix="mqcloud-bench-pipeline-"))
    server = RedisServer(tmp / "redis", free_port())
    server.start()
    os.environ["REDIS_URL"] = server.url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mqcloud.settings")
    django.setup()
    from brokers.engine import CatalogSnapshot, TopicInfo
    from pipeline.session import spark_session
    from pipeline.standalone import StandaloneCluster

    snapshot = CatalogSnapshot(
        topics={
            "bench": TopicInfo(code="bench", partitions=args.partitions, archive=True),
            "warm": TopicInfo(code="warm", partitions=2, archive=True),
        }
    )
    try:
        fill(server.url, snapshot, "bench", args.partitions, messages)
        fill(server.url, snapshot, "warm", 2, 400)
        raw = raw_xrange(server.url, "bench", args.partitions, messages)
        print(f"{messages} messages of {len(BODY)} bytes in {args.partitions} partitions")
        print(f"raw redis XRANGE COUNT 100:      {raw:12,.0f} msg/s  (1.00)")
        conf = {"spark.ui.showConsoleProgress": "false"}
        spark = spark_session("local[2]", "mqcloud-bench", conf=conf)
        local = archive_rate(spark, snapshot, server.url, tmp / "local", messages)
        spark.stop()
        print(f"archive on local[2]:             {local:12,.0f} msg/s  ({local / raw:.3f})")
        with StandaloneCluster(tmp / "spark", cores=2, memory="1g") as cluster:
            conf.update({"spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1",
                         "spark.cores.max": "2"})  # fmt: skip
            spark = spark_session(cluster.url, "mqcloud-bench-cluster", conf=conf)
            remote = archive_rate(spark, snapshot, server.url, tmp / "cluster", messages)
            spark.stop()
        print(f"archive on standalone (2 cores): {remote:12,.0f} msg/s  ({remote / raw:.3f})")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
