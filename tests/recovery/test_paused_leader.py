"""A leader paused past the dead-after time (SIGSTOP), then resumed (issue 20 item 9), with
real broker processes: failover within the configured time; the paused broker acknowledges
nothing once it has lost leadership (the request that waited in its socket is too old: code
22; a fresh produce is fenced: 188); it is back in FETCH_CLUSTER as soon as it heartbeats
and leads its preferred group again once the rebalance finds it healthy."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Callable

import pytest

from brokers.models import Broker, PartitionGroup
from brokers.protocols.jmq4 import Code, CommandType, FetchClusterRequest
from mqcloud.tasks import mark_silent_brokers_down, rebalance_preferred_leaders
from tests.jmq4.conftest import build_catalog
from tests.jmq4.raw import RawClient, frame_bytes
from tests.jmq4.test_messaging import produce_request
from tests.recovery.processes import BrokerProcesses

DEAD_AFTER = 3.0  # seconds of silence before beat marks a broker down (heartbeat: 0.5 s)
REQUEST_TIMEOUT_MS = 3000
HEALTHY_FOR = 1.0  # seconds a recovered broker is up before it leads its group again


def _eventually(check: Callable[[], bool], what: str, within: float = 10) -> float:
    """Wait until ``check()``; the seconds it took."""
    started = time.monotonic()
    while not check():
        assert time.monotonic() - started < within, what
        time.sleep(0.1)
    return time.monotonic() - started


async def _session(port: int, token: str) -> RawClient:
    raw = await RawClient.open(port)
    await raw.login("app1", token)
    return raw


async def _produce(port: int, token: str) -> int:
    raw = await _session(port, token)
    try:
        reply = await raw.call(produce_request("local", 0, b"m"), request_id=2)
        return reply.header.status or reply.payload.topics[0].code
    finally:
        await raw.close()


async def _listed(port: int, token: str) -> list[int]:
    raw = await _session(port, token)
    try:
        reply = await raw.call(FetchClusterRequest(topics=("local",), app="app1"))
        return [b.id for b in reply.payload.brokers]
    finally:
        await raw.close()


def _leader() -> int:
    return PartitionGroup.objects.get(topic__code="local").leader_id


@pytest.mark.django_db(transaction=True)
def test_a_paused_leader_is_fenced_then_rejoins_and_leads_again(redis_url, tmp_path, settings):
    settings.BROKER_DEAD_AFTER_SECONDS = DEAD_AFTER
    catalog = build_catalog(redis_url)  # `local` is led by broker 1 and prefers it
    ports, token = catalog.ports, catalog.token
    brokers = BrokerProcesses(
        redis_url,
        tmp_path,
        BROKER_PROCESSES="1",  # one process per broker: SIGSTOP pauses all of it
        JMQ4_REQUEST_TIMEOUT_MS=str(REQUEST_TIMEOUT_MS),
    )
    with asyncio.Runner() as runner:
        try:
            for bid in (1, 2):
                brokers.start(bid, ports[bid])
            assert runner.run(_produce(ports[1], token)) == Code.SUCCESS
            waiting = runner.run(_session(ports[1], token))

            os.kill(brokers.pid(1), signal.SIGSTOP)
            paused = time.monotonic()
            late = produce_request("local", 0, b"sent to the paused leader")
            waiting.send(frame_bytes(late, 3))  # waits in the paused broker's socket
            _eventually(lambda: mark_silent_brokers_down() == [1], "broker 1 never marked down")
            failover = time.monotonic() - paused
            assert _leader() == 2 and failover < DEAD_AFTER + 2, failover
            _eventually(
                lambda: runner.run(_produce(ports[2], token)) == Code.SUCCESS,
                "broker 2 never took over",
            )
            time.sleep(max(0.0, REQUEST_TIMEOUT_MS / 1000 + 0.2 - (time.monotonic() - paused)))

            os.kill(brokers.pid(1), signal.SIGCONT)
            reply = runner.run(waiting.read())
            assert reply.header.type == CommandType.BOOLEAN_ACK and reply.header.request_id == 3
            assert reply.header.status == Code.CN_REQUEST_TIMEOUT  # not 0: nothing acknowledged
            runner.run(waiting.close())
            fenced = runner.run(_produce(ports[1], token))
            assert fenced == Code.FW_PRODUCE_MESSAGE_BROKER_NOT_LEADER

            back = _eventually(
                lambda: Broker.objects.get(id=1).status == Broker.Status.UP, "never up again"
            )
            _eventually(
                lambda: runner.run(_listed(ports[2], token)) == [1, 2],
                "broker 1 is missing from FETCH_CLUSTER",
            )
            time.sleep(HEALTHY_FOR)
            assert rebalance_preferred_leaders(healthy_for=HEALTHY_FOR) == [
                {"topic": "local", "group": 0, "from": 2, "to": 1},
                {"topic": "orders", "group": 0, "from": 2, "to": 1},
            ]
            _eventually(
                lambda: runner.run(_produce(ports[1], token)) == Code.SUCCESS,
                "broker 1 never led its preferred group again",
                within=5,
            )
            assert back < 3 and runner.run(_produce(ports[2], token)) == (
                Code.FW_PRODUCE_MESSAGE_BROKER_NOT_LEADER
            )
        finally:
            if 1 in brokers.procs and brokers.alive(1):
                os.kill(brokers.pid(1), signal.SIGCONT)
            codes = brokers.stop_all()
    assert codes == {1: 0, 2: 0}, (brokers.log(1), brokers.log(2))
