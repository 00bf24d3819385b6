"""Console list pages at fleet size: bytes and milliseconds per page (issue 21).

Starts its own PostgreSQL and Redis on free ports (scripts/localservices), migrates,
builds the fleet of tests/fleet.py — 10,000 topics of 4 partitions, 20,000 policies, the
latest lag of each consumer, 10 minutes of traffic rollups per topic — publishes the
catalog once so the pages' engine calls (lag, produce rates) find the topics, runs
ANALYZE, and then, as a platform admin through Django's test client (in process: the
figures are the server's time, without a network or daphne), requests every list page
``--runs`` times after one warm-up and prints its size and median time next to the
targets (≤ 300 kB, ≤ 300 ms). It also prints the REST API's consumer-policy list with
``?topic=`` for comparison, the zbus admin index page of an in-process broker (one page
of MQs, a page further on, a search), and what one engine session costs to open (the
pages that show lag or rates open one). The raw Redis baseline (pipelined XADD) is
printed first, as in every benchmark here.

    .venv/bin/python bench/console_lists.py [--topics 10000] [--runs 5]
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.harness import django_ready, django_services  # noqa: E402

TARGET_BYTES = 300_000
TARGET_MS = 300


def measure(client: object, url: str, runs: int) -> tuple[int, float]:
    """(bytes, median ms) of ``runs`` GETs of ``url`` after one warm-up."""
    response = client.get(url)
    assert response.status_code == 200, (url, response.status_code)
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        response = client.get(url)
        times.append((time.perf_counter() - started) * 1000)
    return len(response.content), statistics.median(times)


def run(topics: int, runs: int) -> None:
    django_ready()
    from django.db import connection
    from django.test import Client
    from django.test.utils import setup_test_environment

    from brokers.catalog_loader import publish
    from tests import factories
    from tests.fleet import build_fleet, list_pages

    setup_test_environment()
    logging.getLogger("httpx").setLevel(logging.WARNING)
    logging.getLogger("brokers").setLevel(logging.WARNING)
    started = time.perf_counter()
    build_fleet(topics)
    print(f"fleet of {topics} topics built in {time.perf_counter() - started:.1f} s")
    started = time.perf_counter()
    publish()
    print(f"catalog published once in {time.perf_counter() - started:.1f} s")
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    client = Client()
    client.force_login(factories.user("root", admin=True))
    urls = [*list_pages(), "/api/v1/consumer-policies/?topic=t00042"]
    print(f"{'page':48} {'kB':>7} {'ms':>6}")
    worst_bytes = worst_ms = 0.0
    for url in urls:
        size, ms = measure(client, url, runs)
        worst_bytes, worst_ms = max(worst_bytes, size), max(worst_ms, ms)
        flag = "" if size <= TARGET_BYTES and ms <= TARGET_MS else "  over target"
        print(f"{url:48} {size / 1000:7.1f} {ms:6.0f}{flag}")
    print(f"largest {worst_bytes / 1000:.1f} kB, slowest {worst_ms:.0f} ms (median of {runs})")
    for url in ("/", "/?page=37", "/?q=t0420"):
        size, ms = zbus_index(url, runs)
        print(f"{'zbus index ' + url:48} {size / 1000:7.1f} {ms:6.0f}")
    print(f"one empty engine session (what a page pays before its one batched engine call): "
          f"{session_ms(runs):.0f} ms")  # fmt: skip


def zbus_index(path: str, runs: int) -> tuple[int, float]:
    """(bytes, median ms) of the zbus admin index page of an in-process broker."""
    import asyncio

    import httpx
    import redis.asyncio as aioredis
    from django.conf import settings

    from brokers.engine import CatalogWatcher, Engine
    from brokers.servers.zbus import start_zbus_server

    async def go() -> tuple[int, float]:
        client = aioredis.from_url(settings.REDIS_URL)
        watcher = CatalogWatcher(client)
        await watcher.start()
        engine = Engine(client, lambda: watcher.current, broker_id=101)
        server = await start_zbus_server(engine, watcher, "127.0.0.1", 0, 101)
        try:
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.port}") as http:
                body = (await http.get(path)).content
                times = []
                for _ in range(runs):
                    started = time.perf_counter()
                    body = (await http.get(path)).content
                    times.append((time.perf_counter() - started) * 1000)
            return len(body), statistics.median(times)
        finally:
            await server.stop(grace=1.0)
            await engine.close()
            await watcher.stop()
            await client.aclose()

    return asyncio.run(go())


def session_ms(runs: int) -> float:
    """Median ms of an engine session doing nothing: opening it reads the catalog log
    (the web process keeps the catalog between sessions)."""
    from mqcloud.console import engine_calls

    async def nothing(engine: object) -> None:
        return None

    times = []
    for _ in range(runs):
        started = time.perf_counter()
        engine_calls.run(nothing)
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--topics", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    with django_services():
        run(args.topics, args.runs)


if __name__ == "__main__":
    main()
