"""A broker back from a failure rejoins (issue 20 item 9): FETCH_CLUSTER lists it again as
soon as it is up, though it leads nothing yet; once it has been up the healthy while, the
preferred-leader rebalance gives its group back, and the broker that led meanwhile is
fenced from writing to it (188) while the recovered one is served."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta

import pytest
from django.utils import timezone

from brokers.catalog_loader import publish
from brokers.models import Broker, PartitionGroup
from brokers.protocols.jmq4 import Code, FetchClusterRequest, FetchClusterResponse
from mqcloud.tasks import rebalance_preferred_leaders
from tests.jmq4.conftest import Broker_
from tests.jmq4.raw import RawClient
from tests.jmq4.test_messaging import produce_request

pytestmark = pytest.mark.django_db

Layout = tuple[list[tuple[int, int]], list[int]]


async def _settled(brokers: dict[int, Broker_], version: int) -> None:
    """Wait until every broker has applied catalog ``version``."""
    deadline = time.monotonic() + 5
    while any(b.watcher.current.version < version for b in brokers.values()):
        assert time.monotonic() < deadline, "a broker did not pick up the catalog"
        await asyncio.sleep(0.05)


async def _cluster(port: int, token: str) -> Layout:
    """``orders``' (group, leader) pairs and the broker ids FETCH_CLUSTER lists."""
    raw = await RawClient.open(port)
    try:
        await raw.login("app1", token)
        reply = await raw.call(FetchClusterRequest(topics=("orders",), app="app1"))
        payload: FetchClusterResponse = reply.payload
        groups = [(g.group_id, g.leader) for g in payload.topics[0].partition_groups]
        return groups, [b.id for b in payload.brokers]
    finally:
        await raw.close()


async def _produce(port: int, token: str) -> int:
    raw = await RawClient.open(port)
    try:
        await raw.login("app1", token)
        reply = await raw.call(produce_request("orders", 0, b"p0"), request_id=2)
        return reply.payload.topics[0].code
    finally:
        await raw.close()


def test_a_recovered_broker_is_listed_and_leads_its_preferred_group_again(catalog, redis_url):
    # failover has given orders' group 0 (preferred: broker 1) to broker 2; broker 1 is down
    PartitionGroup.objects.filter(topic__code="orders", group_id=0).update(leader_id=2)
    Broker.objects.filter(id=1).update(status=Broker.Status.DOWN, up_since=None)
    version = publish().version
    brokers = {bid: Broker_(bid, port, redis_url) for bid, port in catalog.ports.items()}
    port1, port2, token = catalog.ports[1], catalog.ports[2], catalog.token
    with asyncio.Runner() as runner:  # the ORM runs between steps, outside the event loop
        for b in brokers.values():
            runner.run(b.start())
        try:
            runner.run(_settled(brokers, version))
            assert runner.run(_cluster(port2, token)) == ([(0, 2), (1, 2)], [2])

            now = timezone.now()  # broker 1 is back: listed at once, leading nothing yet
            Broker.objects.filter(id=1).update(
                status=Broker.Status.UP, up_since=now, last_heartbeat=now
            )
            runner.run(_settled(brokers, publish().version))
            assert runner.run(_cluster(port2, token)) == ([(0, 2), (1, 2)], [1, 2])
            assert rebalance_preferred_leaders(healthy_for=60) == []

            Broker.objects.filter(id=1).update(up_since=now - timedelta(seconds=61))
            assert rebalance_preferred_leaders(healthy_for=60) == [
                {"topic": "orders", "group": 0, "from": 2, "to": 1}
            ]
            runner.run(_settled(brokers, publish().version))  # the commit's publish
            assert runner.run(_cluster(port1, token)) == ([(0, 1), (1, 2)], [1, 2])
            assert runner.run(_produce(port2, token)) == Code.FW_PRODUCE_MESSAGE_BROKER_NOT_LEADER
            assert runner.run(_produce(port1, token)) == Code.SUCCESS
        finally:
            for b in brokers.values():
                runner.run(b.stop())
