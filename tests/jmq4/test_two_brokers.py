"""Two real broker processes (``manage.py runbroker``): leader rules 187/188 and the client
following the metadata; graceful stop marks each broker down."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings as django_settings

from brokers.clients.jmq4 import Jmq4Client
from brokers.models import Broker
from brokers.protocols.jmq4 import (
    AddConsumerRequest,
    Code,
    FetchTopicMessageRequest,
    TopicFetch,
)
from tests.jmq4.conftest import build_catalog
from tests.jmq4.raw import RawClient
from tests.jmq4.test_messaging import produce_request
from tests.scripts_path import wait_for_port

ROOT = Path(__file__).resolve().parents[2]


def _start(broker_id: int) -> subprocess.Popen:
    db = django_settings.DATABASES["default"]
    env = {
        **os.environ,
        "DATABASE_URL": f"postgres://{db['USER']}:{db['PASSWORD']}@{db['HOST']}:{db['PORT']}"
        f"/{db['NAME']}",
        "BROKER_HEARTBEAT_SECONDS": "0.5",
    }
    return subprocess.Popen(
        [
            sys.executable,
            "manage.py",
            "runbroker",
            "--broker-id",
            str(broker_id),
            "--bind",
            "127.0.0.1",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


async def _exercise(catalog) -> None:
    raw = await RawClient.open(catalog.ports[1])
    await raw.login("app1", catalog.token)
    reply = await raw.call(produce_request("orders", 2, b"wrong broker"))
    assert reply.payload.topics[0].code == Code.FW_PRODUCE_MESSAGE_BROKER_NOT_LEADER
    await raw.call(AddConsumerRequest(topics=("remote",), app="app1"))
    reply = await raw.call(
        FetchTopicMessageRequest(topics=(TopicFetch(topic="remote"),), app="app1")
    )
    assert reply.payload.topics[0].code == Code.FW_FETCH_TOPIC_MESSAGE_BROKER_NOT_LEADER
    await raw.close()

    async with Jmq4Client("127.0.0.1", catalog.ports[1], app="app1", token=catalog.token) as c:
        for p in range(4):
            assert (await c.produce("orders", [f"p{p}".encode()], partition=p))[0].index == 0
        assert (await c.produce("remote", [b"r"]))[0].partition in (0, 1)
        seen = []
        for _ in range(6):
            batch = await c.fetch("orders")
            seen += [m.body for m in batch]
            await c.ack(batch)
        assert sorted(seen) == [b"p0", b"p1", b"p2", b"p3"]
        assert [m.body for m in await c.fetch("remote", long_poll_ms=500)] == [b"r"]


@pytest.mark.django_db(transaction=True)
def test_two_broker_processes_follow_leaders(redis_url):
    catalog = build_catalog(redis_url)
    procs = {bid: _start(bid) for bid in (1, 2)}
    try:
        for bid, proc in procs.items():
            wait_for_port(catalog.ports[bid], timeout=30)
            assert proc.poll() is None
        asyncio.run(_exercise(catalog))
    finally:
        outputs = {}
        for proc in procs.values():
            proc.send_signal(signal.SIGTERM)
        for bid, proc in procs.items():
            outputs[bid], _ = proc.communicate(timeout=30)
    for bid, proc in procs.items():
        assert proc.returncode == 0, outputs[bid]
        assert f"broker {bid} stopped" in outputs[bid] and "Traceback" not in outputs[bid]
    statuses = dict(Broker.objects.values_list("id", "status"))
    assert statuses == {1: "down", 2: "down"}
