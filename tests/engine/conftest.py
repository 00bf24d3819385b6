"""Engine fixtures: a store on single Redis and on a local 3-node Redis Cluster.

``store`` is parametrised over both backends; ``cluster_ports`` starts three
``redis-server --cluster-enabled yes`` processes once per session in a temp dir, joins
them with ``redis-cli --cluster create`` and kills them (by PID) at the end.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis
from redis.asyncio.cluster import ClusterNode, RedisCluster

from brokers.engine import (
    BrokerInfo,
    CatalogSnapshot,
    ConsumerPolicyInfo,
    Engine,
    Mailboxes,
    PartitionGroupInfo,
    ProducerPolicyInfo,
    TopicInfo,
)
from tests.scripts_path import wait_for_port as wait_port


def _is_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def cluster_port(taken: list[int]) -> int:
    """A free port whose cluster bus port (port + 10000) is free and valid too."""
    rng = random.Random()
    while True:
        port = rng.randint(20000, 50000)
        if port not in taken and _is_free(port) and _is_free(port + 10000):
            return port


@pytest.fixture(scope="session")
def cluster_ports() -> Iterator[list[int]]:
    """Three cluster-enabled redis-servers joined into one cluster (no replicas)."""
    workdir = Path(tempfile.mkdtemp(prefix="mqcloud-cluster-"))
    ports: list[int] = []
    for _ in range(3):
        ports.append(cluster_port(ports))
    procs: list[subprocess.Popen] = []
    try:
        for port in ports:
            d = workdir / str(port)
            d.mkdir()
            procs.append(
                subprocess.Popen(
                    [
                        "redis-server",
                        "--port",
                        str(port),
                        "--bind",
                        "127.0.0.1",
                        "--dir",
                        str(d),
                        "--cluster-enabled",
                        "yes",
                        "--cluster-config-file",
                        "nodes.conf",
                        "--appendonly",
                        "no",
                        "--save",
                        "",
                        "--protected-mode",
                        "no",
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
        for port in ports:
            wait_port(port)
        subprocess.run(
            [
                "redis-cli",
                "--cluster",
                "create",
                *[f"127.0.0.1:{p}" for p in ports],
                "--cluster-replicas",
                "0",
                "--cluster-yes",
            ],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=60,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            infos = [
                subprocess.run(
                    ["redis-cli", "-p", str(p), "cluster", "info"],
                    capture_output=True,
                    text=True,
                    check=False,
                ).stdout
                for p in ports
            ]
            if all("cluster_state:ok" in info for info in infos):
                break
            time.sleep(0.1)
        else:
            raise TimeoutError("cluster did not reach cluster_state:ok")
        yield ports
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture(params=["single", "cluster"])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[aioredis.Redis | RedisCluster]:
    """A flushed client on single Redis or on the local Redis Cluster."""
    if request.param == "single":
        client = aioredis.from_url(request.getfixturevalue("redis_url"))
        await client.flushall()
    else:
        ports = request.getfixturevalue("cluster_ports")
        client = RedisCluster(startup_nodes=[ClusterNode("127.0.0.1", p) for p in ports])
        await client.initialize()
        await client.flushall(target_nodes=RedisCluster.PRIMARIES)
    try:
        yield client
    finally:
        await client.aclose()


class FakeClock:
    """A controllable clock (seconds), starting at a realistic epoch time."""

    def __init__(self, start: float = 1_750_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def snapshot(
    *,
    topics: dict[str, dict] | None = None,
    consumers: list[dict] | None = None,
    producers: list[dict] | None = None,
    brokers: dict[int, dict] | None = None,
) -> CatalogSnapshot:
    """A catalog snapshot built from short dicts (defaults: topic t, 4 partitions, app a)."""
    topics = topics if topics is not None else {"t": {"partitions": 4}}
    topic_infos = {code: TopicInfo(code=code, **kw) for code, kw in topics.items()}
    producers = producers if producers is not None else [{"topic": c, "app": "a"} for c in topics]
    consumers = consumers if consumers is not None else [{"topic": c, "app": "a"} for c in topics]
    return CatalogSnapshot(
        version=1,
        brokers={
            i: BrokerInfo(id=i, host="127.0.0.1", jmq4_port=1, zbus_port=2, vibemq_port=3, **kw)
            for i, kw in (brokers or {}).items()
        },
        topics=topic_infos,
        producers=tuple(
            ProducerPolicyInfo(name=f"{p['app']}.{p['topic']}", **p) for p in producers
        ),
        consumers=tuple(
            ConsumerPolicyInfo(name=f"{c['app']}.{c['topic']}", **c) for c in consumers
        ),
    )


@pytest.fixture
async def make_engine(store, clock) -> AsyncIterator[Callable[..., Engine]]:
    """Build engines on ``store`` with the fake clock; closed after the test."""
    engines: list[Engine] = []

    def build(snap: CatalogSnapshot | None = None, **kwargs) -> Engine:
        holder = {"snap": snap or snapshot()}
        engine = Engine(store, lambda: holder["snap"], clock=kwargs.pop("clock", clock), **kwargs)
        engine.set_snapshot = lambda s: holder.__setitem__("snap", s)  # type: ignore[attr-defined]
        engines.append(engine)
        return engine

    yield build
    for engine in engines:
        await engine.close()


__all__ = ["FakeClock", "PartitionGroupInfo", "snapshot"]


@contextlib.asynccontextmanager
async def listening_inbox(
    engine: Engine, space: str = "box"
) -> AsyncIterator[tuple[Mailboxes, Mailboxes, asyncio.Queue[bytes]]]:
    """An owner listening on its inbox of ``space`` (stopped on exit), a sender in the same
    space, and the queue of what the owner heard."""
    owner, sender = engine.mailboxes(space, 30_000), engine.mailboxes(space, 30_000)
    heard: asyncio.Queue[bytes] = asyncio.Queue()
    await owner.start(heard.put_nowait)
    try:
        yield owner, sender, heard
    finally:
        await owner.stop()
