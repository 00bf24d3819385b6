"""Live HTTP-MQ services (``manage.py runproxy``) and a web process for HTTP-MQ tests, and
a catalog to aim at.

Every service runs as a real process on a free loopback port, on the session's Redis and
test database, and is stopped by its PID.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from brokers.catalog_loader import publish
from brokers.models import ConsumerPolicy, ProducerPolicy, Team
from tests import factories
from tests.engine_calls import engine_call
from tests.scripts_path import free_port, wait_for_port

ROOT = Path(__file__).resolve().parents[2]
_names = itertools.count(1)


def session_database_url() -> str:
    """The URL of the database pytest-django created for this session."""
    from django.conf import settings

    db = settings.DATABASES["default"]
    return f"postgres://{db['USER']}:{db['PASSWORD']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"


def _procfile_web_limits() -> tuple[str, ...]:
    """The WebSocket size options the Procfile's ``web`` process gives daphne."""
    lines = (ROOT / "Procfile").read_text().splitlines()
    line = next(text for text in lines if text.startswith("web:"))
    words = line.split()
    return tuple(
        w
        for i, w in enumerate(words)
        if w.startswith("--websocket-max") or (i > 0 and words[i - 1].startswith("--websocket-max"))
    )


DAPHNE_WS_LIMITS = _procfile_web_limits()


def start_daphne(port: int, log: Path, **extra_env: str) -> subprocess.Popen:
    """daphne as the Procfile's ``web`` process runs it (its WebSocket limits included)."""
    env = {**os.environ, "DEBUG": "false", "DATABASE_URL": session_database_url(), **extra_env}
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "daphne",
                "-b",
                "127.0.0.1",
                "-p",
                str(port),
                *DAPHNE_WS_LIMITS,
                "mqcloud.asgi:application",
            ],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    wait_for_port(port, timeout=30)
    return proc


def start_proxy(
    port: int, log: Path, console_url: str = "", *, processes: int = 1, **extra_env: str
) -> subprocess.Popen:
    """``manage.py runproxy`` on ``port`` with ``processes`` serving processes (more than
    one: under its supervisor); ``HTTPMQ_*`` settings in ``extra_env``; returns once it
    accepts connections (its catalog is loaded by then)."""
    env = {
        **os.environ,
        "DEBUG": "false",
        "HTTPMQ_CONSOLE_URL": console_url or f"http://127.0.0.1:{free_port()}",
        **extra_env,
    }
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "manage.py",
                "runproxy",
                "--port",
                str(port),
                "--processes",
                str(processes),
            ],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    wait_for_port(port, timeout=30)
    return proc


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="session")
def mq_urls(django_db_setup, django_db_blocker, tmp_path_factory) -> Iterator[list[str]]:
    """Two HTTP-MQ services on the session's Redis (statelessness is tested across them)
    and the web process they relay console-token endpoints to, on the test database;
    their output goes to *.log in the session's temp dir."""
    from tests.redis_fixtures import require_test_session

    require_test_session()
    logs = tmp_path_factory.mktemp("httpmq")
    web_port, ports = free_port(), [free_port(), free_port()]
    web = start_daphne(web_port, logs / "web.log")
    console = f"http://127.0.0.1:{web_port}"
    # The second service trusts the loopback peer as a proxy (X-Forwarded-For tests).
    procs = [
        start_proxy(ports[0], logs / "proxy-0.log", console),
        start_proxy(ports[1], logs / "proxy-1.log", console, HTTPMQ_TRUSTED_PROXIES="127.0.0.1"),
    ]
    yield [f"http://127.0.0.1:{port}" for port in ports]
    for proc in [*procs, web]:
        stop(proc)


@pytest.fixture
def mq(mq_urls) -> Iterator[httpx.Client]:
    """A client of the first HTTP-MQ service."""
    with httpx.Client(base_url=mq_urls[0], timeout=20) as client:
        yield client


@dataclass
class Setup:
    topic: str
    app: str
    token: str
    producer: str
    consumer: str
    other_token: str


def make_catalog(
    partitions: int = 2, *, broadcast: bool = False, with_consumer: bool = True, **consumer: object
) -> Setup:
    """A fresh topic, app, producer and consumer (unique names), published to Redis."""
    n = next(_names)
    team = Team.objects.create(name=f"t{n}-{time.monotonic_ns()}")
    cluster = factories.cluster_with_brokers(f"c{n}-{time.monotonic_ns()}", first_id=1000 + 10 * n)
    topic = factories.topic(
        f"topic{n}-{time.monotonic_ns()}", cluster, team, partitions=partitions, groups=1
    )
    app, token = factories.app(f"app{n}-{time.monotonic_ns()}", team)
    _, other_token = factories.app(f"other{n}-{time.monotonic_ns()}", team)
    ProducerPolicy.objects.create(topic=topic, app=app, http_enabled=True)
    consumer.setdefault("start_position", "earliest")
    if with_consumer:
        ConsumerPolicy.objects.create(
            topic=topic,
            app=app,
            http_enabled=True,
            mode="broadcast" if broadcast else "clustering",
            **consumer,
        )
    publish()
    return Setup(
        topic.code,
        app.code,
        token,
        f"{app.code}.{topic.code}",
        f"{app.code}.{topic.code}",
        other_token,
    )


def wait_known(client: httpx.Client, setup: Setup, *, producer_only: bool = False) -> None:
    """Wait until the HTTP-MQ service has the snapshot naming ``setup`` (well under 1 s):
    asked with the app's token and a request the named client would be refused (a
    produce without a message, a fetch of another topic), so nothing is stored or locked
    — 401 until the service knows the app's token, 404 until it knows the name."""
    deadline = time.monotonic() + 3
    headers = {"Authorization": f"Bearer {setup.token}"}
    while time.monotonic() < deadline:
        if producer_only:
            r = client.post("/mq/produce", data={"producer": setup.producer}, headers=headers)
        else:
            r = client.get(
                "/mq/message",
                headers=headers,
                params={"topic": setup.topic + "-not", "consumer": setup.consumer},
            )
        if r.status_code not in (401, 404):
            return
        time.sleep(0.02)
    raise AssertionError("the HTTP-MQ service never saw the catalog change")


def release_delayed(topic: str) -> int:
    """Run the engine's release of ``topic``'s due delayed messages (what the Celery beat
    task does every second); how many were appended."""
    return engine_call(lambda engine: engine.release_delayed(topic))
