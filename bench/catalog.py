"""Catalog benchmark at fleet size (a script, not a test; issue 21):
``.venv/bin/python bench/catalog.py [--topics 10000] [--changes 100] [--save-changes 20]
[--api-sample 10] [--create-limit SECONDS] [--batch 1]``.

Starts its own PostgreSQL and Redis (free loopback ports, temporary directories), migrates
the database and starts the real process set on free ports: the web process (daphne), two
brokers (``manage.py runbroker --processes 1``) and the HTTP-MQ proxy (``manage.py
runproxy --processes 1``). Then it measures and prints:

* creation: ``--topics`` topics of 4 partitions (2 partition groups), each with one
  producer and one consumer policy of apps of different teams (200 teams, 400 apps), made
  THROUGH THE MODELS as the REST API's serializers make them (one transaction per topic
  and its two policies; every signal fires, the brokers and the proxy follow the catalog
  meanwhile) — goal ≤ 120 s at 10,000 topics; ``--batch N`` makes N topics per transaction
  (a bulk import: one delta and one pin batch each). ``--create-limit`` stops creating after
  that many seconds (the rest of the run uses what was made) and prints the rate; a
  sample of ``--api-sample`` topics is also made through the REST API (3 POSTs each);
* propagation: ``--changes`` times, a consumer policy is paused or resumed (alternately)
  with ``PATCH /api/v1/consumer-policies/{id}/`` (an admin's API token), and
  ``--save-changes`` times with a model save in this process; clients that see the change
  on the wire poll until EVERY process enforces it — HTTP-MQ ``/mq/message`` on the proxy
  (``PAUSED``, or 503 NO_QUEUE_AVAILABLE while running: the benchmark holds every
  partition's lock so a fetch never long-polls) and JMQ4 FETCH_TOPIC_MESSAGE on each
  broker (code 186 while paused). p50/p95/p99/max of "change sent → all see it" and of
  the PATCH response time — goal p99 ≤ 1 s;
* the catalog: full snapshot built from PostgreSQL (time), encoded size, decode time and
  the memory its decoded form holds (tracemalloc), the size and decode+apply time of the
  deltas in the catalog log (creation's and the pauses'), each broker's and the proxy's
  RSS before and after creation, ``publish()`` in process and ``manage.py publishcatalog``;
* JMQ4 FETCH_CLUSTER latency of one topic (p50/p99) at that catalog size (the issue saw
  7–8 ms at 10,000 topics);
* the raw Redis baseline: GET of the stored snapshot key with redis-py, and
  ``redis-benchmark`` SET/GET of a value of the snapshot's size.

Every process it started is stopped by its PID, and PostgreSQL, Redis and their
directories are removed at the end, whatever happened.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import django  # noqa: E402
import httpx  # noqa: E402
import redis  # noqa: E402
from localservices import PostgresServer, RedisServer, free_port, wait_for_port  # noqa: E402

from bench.harness import stop_process  # noqa: E402

TEAMS = 200
APPS = 400
PARTITIONS = 4
GROUPS = 2
HOLD_MS = 3_600_000  # the benchmark's own lock on every partition of the observed topic


def quantiles(values: list[float]) -> str:
    """p50/p95/p99/max of ``values`` (seconds) in ms."""
    if not values:
        return "no samples"
    ordered = sorted(values)

    def q(p: float) -> float:
        return ordered[min(len(ordered) - 1, round(p * (len(ordered) - 1)))] * 1000

    return (
        f"p50 {q(0.50):8.1f} ms  p95 {q(0.95):8.1f} ms  p99 {q(0.99):8.1f} ms"
        f"  max {ordered[-1] * 1000:8.1f} ms  (n={len(values)})"
    )


def p99(values: list[float]) -> float:
    """The 99th percentile of ``values`` (nearest rank)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))] if ordered else 0.0


def rss_mb(pid: int) -> float:
    """Resident memory of ``pid`` in MB (0 when unknown)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


# ---------------------------------------------------------------- the process set


@dataclass
class ProcessSet:
    """The processes this benchmark started (stopped by PID on exit)."""

    workdir: Path
    env: dict[str, str]
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)

    def start(self, name: str, argv: list[str], port: int, timeout: float = 60) -> None:
        log = (self.workdir / f"{name}.log").open("ab")
        proc = subprocess.Popen(argv, cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT)
        self.procs[name] = proc
        try:
            wait_for_port(port, timeout)
        except TimeoutError:
            raise RuntimeError(
                f"{name} did not listen on {port}; see {self.workdir}/{name}.log"
            ) from None

    def stop(self) -> None:
        for proc in self.procs.values():
            stop_process(proc, timeout=30)


# ---------------------------------------------------------------- creation


@dataclass
class Fleet:
    cluster: Any
    teams: list[Any]
    apps: list[Any]
    tokens: dict[str, str]
    admin_token: str
    created: int = 0


def make_fleet() -> Fleet:
    from django.contrib.auth import get_user_model

    from brokers.models import App, Cluster, Team
    from mqcloud.api.models import ApiToken

    users = get_user_model()
    admin = users.objects.create_superuser("bench-admin", "admin@bench.test", "pw-Secret-123")
    cluster = Cluster.objects.get_or_create(name="bench")[0]
    teams = [Team.objects.create(name=f"team{i:03d}") for i in range(TEAMS)]
    apps, tokens = [], {}
    for j in range(APPS):
        app = App.objects.create(code=f"app{j:03d}", team=teams[j * TEAMS // APPS])
        tokens[app.code] = app.issue_token()
        apps.append(app)
    return Fleet(cluster, teams, apps, tokens, ApiToken.issue(admin, "bench"))


def pair(i: int) -> tuple[int, int]:
    """Producer and consumer app of topic ``i``: apps of different teams."""
    return i % APPS, (i + APPS // 2 + 1) % APPS


def create_topic(fleet: Fleet, i: int) -> None:
    """Topic ``i`` with its partition groups and two policies, as the REST API's
    serializers save them (in the caller's transaction)."""
    from brokers.models import ConsumerPolicy, ProducerPolicy, Topic
    from brokers.topology import create_partition_groups

    prod, cons = pair(i)
    topic = Topic(
        code=f"bench.t{i:05d}",
        cluster=fleet.cluster,
        team=fleet.apps[prod].team,
        partitions=PARTITIONS,
        creator="bench-admin",
    )
    topic.save()
    create_partition_groups(topic, GROUPS)
    ProducerPolicy.objects.create(topic=topic, app=fleet.apps[prod], http_enabled=True)
    ConsumerPolicy.objects.create(
        topic=topic, app=fleet.apps[cons], http_enabled=True, start_position="latest"
    )


def create_all(fleet: Fleet, topics: int, limit: float, batch: int = 1) -> float:
    """Create ``topics`` topics, ``batch`` per transaction (1: one topic with its groups
    and policies per transaction, as one API client making them one by one; more: a
    fleet imported in bulk, each transaction's changes published as one delta)."""
    from django.db import transaction

    started = time.monotonic()
    step = max(batch, min(topics // 10, 250) // batch * batch)
    i = 0
    while i < topics:
        with transaction.atomic():
            for k in range(i, min(i + batch, topics)):
                create_topic(fleet, k)
        i = min(i + batch, topics)
        fleet.created = i
        elapsed = time.monotonic() - started
        if i % step == 0 or i == topics:
            print(f"  {i:6d} topics in {elapsed:7.1f} s ({i / elapsed:6.1f} topics/s)", flush=True)
        if elapsed > limit:
            print(f"  --create-limit {limit:.0f} s reached: stopping at {i} topics", flush=True)
            break
    return time.monotonic() - started


def create_through_api(fleet: Fleet, web: str, count: int) -> list[float]:
    """``count`` topics through the REST API (topic, producer, consumer: 3 POSTs each)."""
    headers = {"Authorization": f"Bearer {fleet.admin_token}"}
    times = []
    with httpx.Client(base_url=web, headers=headers, timeout=600) as client:
        for k in range(count):
            prod, cons = pair(k)
            code = f"bench.api{k:04d}"
            started = time.monotonic()
            for path, body in (
                (
                    "/api/v1/topics/",
                    {"code": code, "cluster": "bench", "team": fleet.apps[prod].team.name,
                     "partitions": PARTITIONS, "partition_groups": GROUPS},
                ),
                ("/api/v1/producer-policies/", {"topic": code, "app": fleet.apps[prod].code}),
                (
                    "/api/v1/consumer-policies/",
                    {"topic": code, "app": fleet.apps[cons].code, "http_enabled": True},
                ),
            ):  # fmt: skip
                r = client.post(path, json=body)
                if r.status_code != 201:
                    raise RuntimeError(f"POST {path}: {r.status_code} {r.text[:300]}")
            times.append(time.monotonic() - started)
    return times


# ---------------------------------------------------------------- observers


class Observer:
    """A client that tells, on the wire, whether one process enforces the pause."""

    name: str

    async def paused(self) -> bool:
        raise NotImplementedError

    async def close(self) -> None:
        return None


class ProxyObserver(Observer):
    def __init__(self, url: str, topic: str, consumer: str, token: str) -> None:
        self.name = "proxy"
        self.url = url
        self.client: httpx.AsyncClient | None = None
        self.params = {
            "topic": topic,
            "consumer": consumer,
            "maxPullSize": "1",
            "consumeTimeoutInMillis": str(HOLD_MS),
            "pullTimeoutInMillis": "1000",
        }
        self.headers = {"Authorization": f"Bearer {token}"}

    async def open(self) -> None:
        """A client on the running event loop."""
        self.client = httpx.AsyncClient(base_url=self.url, timeout=30)

    async def fetch(self) -> httpx.Response:
        assert self.client is not None, "open() first"
        return await self.client.get("/mq/message", params=self.params, headers=self.headers)

    async def paused(self) -> bool:
        r = await self.fetch()
        return r.status_code == 200 and r.json()["result"]["status"] == "PAUSED"

    async def hold_every_partition(self) -> None:
        """Lease every partition (one message each, held for an hour), so that a fetch of
        the running consumer answers NO_QUEUE_AVAILABLE at once instead of long-polling."""
        for _ in range(PARTITIONS * 3):
            r = await self.fetch()
            if r.status_code == 503:
                return
        raise RuntimeError(f"could not hold every partition: {r.status_code} {r.text[:200]}")

    async def close(self) -> None:
        if self.client is not None:
            await self.client.aclose()
            self.client = None


class Jmq4Observer(Observer):
    def __init__(self, broker_id: int, port: int, topic: str, app: str, token: str) -> None:
        self.name = f"broker{broker_id}"
        self.port, self.topic, self.app, self.token = port, topic, app, token
        self.conn: Any = None

    async def open(self) -> None:
        from brokers.clients.jmq4.connection import Jmq4Connection
        from brokers.protocols.jmq4 import AddConnectionRequest, AddConsumerRequest, Language

        self.conn = await Jmq4Connection.open("127.0.0.1", self.port)
        await self.conn.request(
            AddConnectionRequest(
                app=self.app, token=self.token, language=Language.PYTHON, version="bench"
            )
        )
        await self.conn.request(AddConsumerRequest(topics=(self.topic,), app=self.app))

    async def paused(self) -> bool:
        from brokers.protocols.jmq4 import Code, FetchTopicMessageRequest, TopicFetch

        frame = await self.conn.request(
            FetchTopicMessageRequest(
                topics=(TopicFetch(topic=self.topic, count=1),), app=self.app, long_poll_timeout=0
            )
        )
        code = frame.payload.topics[0].code
        if code not in (Code.SUCCESS, Code.FW_FETCH_TOPIC_MESSAGE_PAUSED):
            raise RuntimeError(f"{self.name}: fetch answered {code!r}")
        return code == Code.FW_FETCH_TOPIC_MESSAGE_PAUSED

    async def fetch_cluster(self) -> float:
        from brokers.protocols.jmq4 import FetchClusterRequest

        started = time.perf_counter()
        await self.conn.request(FetchClusterRequest(topics=(self.topic,), app=self.app))
        return time.perf_counter() - started

    async def close(self) -> None:
        if self.conn is not None:
            await self.conn.close()
            self.conn = None


async def until(observer: Observer, want: bool, t0: float, limit_s: float) -> float:
    """Seconds from ``t0`` until ``observer`` reports ``want`` (inf after ``limit_s``)."""
    while time.perf_counter() - t0 < limit_s:
        if await observer.paused() == want:
            return time.perf_counter() - t0
        await asyncio.sleep(0.002)
    return float("inf")


async def propagation(
    observers: list[Observer],
    changes: int,
    change: Callable[[bool], Awaitable[None]],
    start_paused: bool,
    limit_s: float = 15.0,
) -> tuple[list[float], list[float], dict[str, list[float]]]:
    """``changes`` alternating pause/resume changes: (sent → all see it, change call
    duration, per observer sent → it sees it)."""
    seen_all, calls = [], []
    per: dict[str, list[float]] = {o.name: [] for o in observers}
    state = start_paused
    for _ in range(changes):
        state = not state
        t0 = time.perf_counter()
        watchers = [asyncio.create_task(until(o, state, t0, limit_s)) for o in observers]
        await change(state)
        calls.append(time.perf_counter() - t0)
        got = await asyncio.gather(*watchers)
        for o, seconds in zip(observers, got, strict=True):
            per[o.name].append(seconds)
        seen_all.append(max(got))
        await asyncio.sleep(0.05)
    return seen_all, calls, per


# ---------------------------------------------------------------- catalog figures


def snapshot_figures() -> Any:
    from brokers.catalog_loader import build_snapshot
    from brokers.engine import CatalogSnapshot

    started = time.perf_counter()
    snap = build_snapshot(1)
    built = time.perf_counter() - started
    data = snap.encode()
    decodes = []
    for _ in range(5):
        started = time.perf_counter()
        CatalogSnapshot.decode(data)
        decodes.append(time.perf_counter() - started)
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    held = CatalogSnapshot.decode(data)
    # what a broker builds on first use: the snapshot's lookup tables
    with contextlib.suppress(Exception):
        held.consumer(next(iter(held.topics)), "x")
        held.producer(next(iter(held.topics)), "x")
    current, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    topics = max(1, len(snap.topics))
    print(
        f"full snapshot: {len(snap.topics)} topics, {len(snap.producers)} producers,"
        f" {len(snap.consumers)} consumers, {len(snap.apps)} apps", flush=True
    )  # fmt: skip
    print(f"  built from PostgreSQL:   {built * 1000:9.1f} ms")
    print(
        f"  encoded size:            {len(data) / 1e6:9.2f} MB ({len(data) / topics:,.0f} B/topic)"
    )
    print(f"  decode (median of 5):    {statistics.median(decodes) * 1000:9.1f} ms")
    print(
        f"  decoded, held in memory: {(current - before) / 1e6:9.2f} MB"
        f" (peak while decoding {(peak - before) / 1e6:.2f} MB; tracemalloc)",
        flush=True,
    )
    del held
    return snap, data


def delta_figures(snap: Any, label: str, count: int = 100) -> None:
    """Size and decode+apply time of the last ``count`` deltas in the catalog log (what
    every broker, proxy and console process reads for each change)."""
    import redis

    from brokers.engine import CatalogDelta
    from brokers.engine.catalog import LOG_KEY

    client = redis.Redis.from_url(os.environ["REDIS_URL"])
    try:
        entries = list(reversed(client.xrevrange(LOG_KEY, count=count)))
    finally:
        client.close()
    sizes, entities, applies = [], [], []
    for entry_id, fields in entries:
        body = fields[b"d"]
        started = time.perf_counter()
        delta = CatalogDelta.decode(body, int(entry_id.split(b"-")[0]))
        snap.apply(delta)
        applies.append(time.perf_counter() - started)
        sizes.append(len(body))
        entities.append(len(delta))
    if not entries:
        print(f"deltas ({label}): none in the log", flush=True)
        return
    print(
        f"deltas ({label}, last {len(entries)} in the log): size median"
        f" {statistics.median(sizes):,.0f} B, max {max(sizes):,} B;"
        f" entities median {statistics.median(entities):.0f}, max {max(entities)};"
        f" decode+apply at {len(snap.topics):,} topics median"
        f" {statistics.median(applies) * 1e6:,.0f} µs, max {max(applies) * 1e6:,.0f} µs",
        flush=True,
    )


def publish_figures(env: dict[str, str]) -> None:
    from brokers.catalog_loader import publish

    runs = []
    for _ in range(3):
        started = time.perf_counter()
        publish()
        runs.append(time.perf_counter() - started)
    print(f"publish() in process (median of 3):   {statistics.median(runs) * 1000:9.1f} ms")
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "manage.py", "publishcatalog"], cwd=ROOT, env=env, check=True,
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    print(
        f"manage.py publishcatalog (with start): {(time.perf_counter() - started) * 1000:9.1f} ms",
        flush=True,
    )


def raw_baseline(port: int, size: int) -> None:
    from brokers.engine.catalog import SNAPSHOT_KEY

    client = redis.Redis(port=port)
    try:
        runs = []
        for _ in range(20):
            started = time.perf_counter()
            client.get(SNAPSHOT_KEY)
            runs.append(time.perf_counter() - started)
    finally:
        client.close()
    get_ms = statistics.median(runs) * 1000
    print(f"raw Redis GET of the snapshot key (redis-py, median of 20): {get_ms:.2f} ms")
    out = subprocess.run(
        ["redis-benchmark", "-p", str(port), "-n", "200", "-c", "1", "-d", str(max(size, 1)),
         "-q", "-t", "set,get"],
        capture_output=True, text=True, check=False,
    ).stdout  # fmt: skip
    for line in out.splitlines():
        line = line.split("\r")[-1].strip()
        if m := re.match(r"(SET|GET): ([\d.]+) requests per second", line):
            print(
                f"raw redis-benchmark {m.group(1)} of {size / 1e6:.2f} MB, 1 client:"
                f" {float(m.group(2)):,.0f} req/s ({1000 / float(m.group(2)):.2f} ms each)"
            )
    redis.Redis(port=port).delete("key:__rand_int__")


# ---------------------------------------------------------------- the run


def wait_all_know(observers: list[Observer], proxy: ProxyObserver, timeout: float) -> float:
    """Seconds until every broker answers a fetch of the observed topic and the proxy
    knows its consumer (the processes caught up with the catalog)."""

    async def attempt() -> None:
        await proxy.open()
        try:
            for o in observers:
                if isinstance(o, Jmq4Observer):
                    await o.open()
                    try:
                        await o.paused()
                    finally:
                        await o.close()
            if (await proxy.fetch()).status_code in (401, 404):  # token, then name
                raise RuntimeError("proxy does not know the consumer yet")
        finally:
            await proxy.close()

    started = time.perf_counter()
    while True:
        try:
            asyncio.run(attempt())
            return time.perf_counter() - started
        except Exception:
            if time.perf_counter() - started > timeout:
                raise
            time.sleep(0.5)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topics", type=int, default=10_000)
    parser.add_argument("--changes", type=int, default=100, help="PATCH changes measured")
    parser.add_argument("--save-changes", type=int, default=20, help="model-save changes")
    parser.add_argument("--api-sample", type=int, default=10, help="topics made via REST")
    parser.add_argument("--create-limit", type=float, default=3600.0, help="seconds")
    parser.add_argument(
        "--batch", type=int, default=1, help="topics per transaction (1: one by one)"
    )
    args = parser.parse_args()

    workdir = Path(tempfile.mkdtemp(prefix="mqcloud-bench-catalog-"))
    workdir.chmod(0o755)  # as root, PostgreSQL runs as the postgres user
    pg = PostgresServer(workdir / "pg", free_port())
    rd = RedisServer(workdir / "redis", free_port())
    procs: ProcessSet | None = None
    try:
        pg.start()
        rd.start()
        env = {
            **os.environ,
            "DATABASE_URL": pg.url,
            "REDIS_URL": rd.url,
            "DEBUG": "false",
            "DJANGO_SETTINGS_MODULE": "mqcloud.settings",
            "BROKER_PROCESSES": "1",
            "HTTPMQ_PROCESSES": "1",
        }
        os.environ.update(env)
        django.setup()
        for noisy in ("httpx", "httpcore", "brokers", "mqcloud"):
            logging.getLogger(noisy).setLevel(logging.WARNING)
        from django.core.management import call_command

        from brokers.models import Broker, ConsumerPolicy

        call_command("migrate", verbosity=0)
        started = time.monotonic()
        fleet = make_fleet()
        print(
            f"setup: {TEAMS} teams, {APPS} apps with a token each, admin and API token"
            f" in {time.monotonic() - started:.1f} s (each save publishes the catalog)",
            flush=True,
        )
        ports = {b: (free_port(), free_port(), free_port()) for b in (1, 2)}
        for b, (jmq4, zbus, vibemq) in ports.items():
            Broker.objects.create(
                id=b, cluster=fleet.cluster, host="127.0.0.1",
                jmq4_port=jmq4, zbus_port=zbus, vibemq_port=vibemq,
            )  # fmt: skip
        web_port, proxy_port = free_port(), free_port()
        web = f"http://127.0.0.1:{web_port}"
        procs = ProcessSet(workdir, {**env, "HTTPMQ_CONSOLE_URL": web})
        procs.start(
            "web",
            [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(web_port),
             "mqcloud.asgi:application"],
            web_port,
        )  # fmt: skip
        for b in (1, 2):
            procs.start(
                f"broker{b}",
                [sys.executable, "manage.py", "runbroker", "--broker-id", str(b),
                 "--processes", "1"],
                ports[b][0],
            )  # fmt: skip
        procs.start(
            "proxy",
            [sys.executable, "manage.py", "runproxy", "--port", str(proxy_port),
             "--processes", "1"],
            proxy_port,
        )  # fmt: skip
        time.sleep(2)
        rss_before = {name: rss_mb(p.pid) for name, p in procs.procs.items()}

        print(
            f"creating {args.topics} topics ({PARTITIONS} partitions, {GROUPS} groups) with a"
            f" producer and a consumer policy each, through the models ({TEAMS} teams,"
            f" {APPS} apps); web, 2 brokers and the proxy running", flush=True,
        )  # fmt: skip
        elapsed = create_all(fleet, args.topics, args.create_limit, max(1, args.batch))
        made = fleet.created
        goal = 120 * made / 10_000
        print(
            f"CREATION ({args.batch} per transaction): {made} topics + {2 * made} policies"
            f" in {elapsed:.1f} s"
            f" ({made / elapsed:.1f} topics/s; goal ≤ 120 s at 10,000 → ≤ {goal:.0f} s here;"
            f" at this rate 10,000 would take {10_000 / (made / elapsed):.0f} s if linear)",
            flush=True,
        )
        if args.api_sample:
            times = create_through_api(fleet, web, args.api_sample)
            print(f"CREATION via REST API (3 POSTs per topic): {quantiles(times)}", flush=True)

        observed = ConsumerPolicy.objects.select_related("topic", "app").get(
            topic__code="bench.t00000"
        )
        topic, app = observed.topic.code, observed.app.code
        token = fleet.tokens[app]
        proxy = ProxyObserver(f"http://127.0.0.1:{proxy_port}", topic, observed.name, token)
        brokers = [Jmq4Observer(b, ports[b][0], topic, app, token) for b in (1, 2)]
        observers: list[Observer] = [proxy, *brokers]
        caught_up = wait_all_know(observers, proxy, timeout=600)
        print(f"processes caught up with the catalog {caught_up:.1f} s after creation", flush=True)
        time.sleep(3)  # let the last snapshots settle before reading memory
        rss_after = {name: rss_mb(p.pid) for name, p in procs.procs.items()}
        for name in procs.procs:
            print(
                f"RSS {name:8s}: {rss_before[name]:7.1f} MB before creation,"
                f" {rss_after[name]:7.1f} MB after ({rss_after[name] - rss_before[name]:+.1f} MB)"
            )

        snap, data = snapshot_figures()
        delta_figures(snap, "creation")
        publish_figures(env)
        raw_baseline(rd.port, len(data))

        # one message per partition of the observed topic, leased for an hour by the
        # benchmark, so a running consumer's fetch answers at once (no long poll)
        fill_observed(topic, observed.topic, fleet)

        async def measure() -> None:
            await proxy.open()
            for b in brokers:
                await b.open()
            await proxy.hold_every_partition()
            samples = [await brokers[0].fetch_cluster() for _ in range(200)]
            print(f"JMQ4 FETCH_CLUSTER of one topic at {made} topics: {quantiles(samples)}")
            headers = {"Authorization": f"Bearer {fleet.admin_token}"}
            async with httpx.AsyncClient(base_url=web, headers=headers, timeout=120) as api:

                async def patch(paused: bool) -> None:
                    r = await api.patch(
                        f"/api/v1/consumer-policies/{observed.pk}/", json={"paused": paused}
                    )
                    if r.status_code != 200:
                        raise RuntimeError(f"PATCH: {r.status_code} {r.text[:300]}")

                seen, calls, per = await propagation(observers, args.changes, patch, False)
                print(f"PROPAGATION via PATCH ({args.changes} changes, pause/resume alternately):")
                print(f"  PATCH sent → every broker and the proxy enforce it: {quantiles(seen)}")
                print(f"  PATCH response time:                                {quantiles(calls)}")
                for name, values in per.items():
                    print(f"    sent → {name:8s} sees it:                      {quantiles(values)}")
                print(f"  goal p99 ≤ 1000 ms: {'met' if p99(seen) <= 1 else 'NOT met'}")
                delta_figures(snap, "pause/resume")
                if (args.changes % 2) == 1:
                    await patch(False)
                    await asyncio.gather(
                        *(until(o, False, time.perf_counter(), 30) for o in observers)
                    )

            if args.save_changes:

                async def save(paused: bool) -> None:
                    def run() -> None:
                        policy = ConsumerPolicy.objects.get(pk=observed.pk)
                        policy.paused = paused
                        policy.save()

                    await asyncio.to_thread(run)

                seen, calls, _ = await propagation(observers, args.save_changes, save, False)
                print(f"PROPAGATION via model save ({args.save_changes} changes):")
                print(f"  save() called → every broker and the proxy enforce it: {quantiles(seen)}")
                print(f"  save() duration (commit + on_commit work):         {quantiles(calls)}")
            for o in observers:
                await o.close()

        asyncio.run(measure())
        dead = [name for name, p in procs.procs.items() if p.poll() is not None]
        if dead:
            print(f"WARNING: processes that ended during the run: {dead}")
    finally:
        if procs is not None:
            procs.stop()
        rd.stop()
        pg.stop()
        shutil.rmtree(workdir, ignore_errors=True)
        if pg.datadir.parent != workdir:
            shutil.rmtree(pg.datadir.parent, ignore_errors=True)


def fill_observed(code: str, topic: Any, fleet: Fleet) -> None:
    """One message in each partition of the observed topic, appended by its producer."""
    from brokers.catalog_loader import current_snapshot
    from brokers.engine import Engine, Message
    from brokers.engine.redisio import engine_client
    from brokers.models import ProducerPolicy

    producer = ProducerPolicy.objects.select_related("app").get(topic=topic).app.code
    snap = current_snapshot()

    async def run() -> None:
        client = engine_client(os.environ["REDIS_URL"])
        engine = Engine(client, lambda: snap)
        try:
            for p in range(PARTITIONS):
                await engine.append(code, producer, [Message(b"hold")], partition=p)
        finally:
            await engine.close()
            await client.aclose()

    asyncio.run(run())


if __name__ == "__main__":
    main()
