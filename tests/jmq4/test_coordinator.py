"""FIND_COORDINATOR and FETCH_ASSIGNED_PARTITION over raw sockets."""

from __future__ import annotations

import pytest

from brokers.protocols.jmq4 import (
    AddConnectionRequest,
    AssignmentTopic,
    Code,
    FetchAssignedPartitionRequest,
    FindCoordinatorRequest,
)
from tests.jmq4.raw import RawClient

pytestmark = pytest.mark.django_db


def assign_request(*topics: str, nearby: bool = False) -> FetchAssignedPartitionRequest:
    return FetchAssignedPartitionRequest(
        topics=tuple(AssignmentTopic(topic=t, session_timeout=1000, nearby=nearby) for t in topics),
        app="app1",
    )


async def test_coordinator_is_the_same_everywhere_and_assigns(catalog, brokers):
    answers = []
    for bid in (1, 2):
        raw = await RawClient.open(catalog.ports[bid])
        await raw.login("app1", catalog.token)
        reply = await raw.call(FindCoordinatorRequest(topics=("orders", "local"), app="app1"))
        entries = reply.payload.entries
        assert all(e.code == 0 for e in entries) and entries[0].broker == entries[1].broker
        answers.append(entries[0].broker)
        await raw.close()
    assert answers[0] == answers[1]
    coordinator, other = answers[0].id, 3 - answers[0].id
    raw = await RawClient.open(catalog.ports[coordinator])
    await raw.login("app1", catalog.token)
    bad = await raw.call(FindCoordinatorRequest(topics=("ord\x01ers", "orders"), app="app1"))
    assert [(e.code, e.broker) for e in bad.payload.entries] == [
        (Code.CN_PARAM_ERROR, None),  # §8.5: no topic has that name
        (0, answers[0]),
    ]
    bad = await raw.call(assign_request("ord\x01ers"))
    assert [t.code for t in bad.payload.topics] == [Code.CN_PARAM_ERROR]
    await raw.close()
    assert answers[0].port == catalog.ports[coordinator]

    raw = await RawClient.open(catalog.ports[other])
    await raw.login("app1", catalog.token)
    rejected = await raw.call(assign_request("orders"))
    assert rejected.header.status == Code.FW_COORDINATOR_NOT_AVAILABLE
    await raw.close()

    raw = await RawClient.open(catalog.ports[coordinator])
    await raw.login("app1", catalog.token)
    reply = await raw.call(assign_request("orders", "missing"))
    orders, missing = reply.payload.topics
    assert orders.code == 0 and orders.partitions == (0, 1, 2, 3)
    assert missing.code == Code.FW_TOPIC_NOT_EXIST
    nearby = await raw.call(assign_request("orders", nearby=True))
    # the client's region ("") matches the brokers' data centre ("")
    assert nearby.payload.topics[0].partitions == (0, 1, 2, 3)
    await raw.close()


async def test_assignment_balances_members_and_expires_them(catalog, brokers):
    engine = brokers[1].engine  # the engine shares the groups out
    groups = [0, 1]
    assert await engine.assign_groups(
        "t", "a", "10.0.0.1", groups, session_timeout_ms=1, now_ms=0
    ) == (0, 1)
    second = await engine.assign_groups(
        "t", "a", "10.0.0.2", groups, session_timeout_ms=1, now_ms=1
    )
    first = await engine.assign_groups("t", "a", "10.0.0.1", groups, session_timeout_ms=1, now_ms=2)
    assert len(second) == len(first) == 1 and set(first) | set(second) == {0, 1}
    # far past both sessions (1 ms + 60 s grace): the newcomer gets everything again
    alone = await engine.assign_groups(
        "t", "a", "10.0.0.3", groups, session_timeout_ms=1, now_ms=120_000
    )
    assert alone == (0, 1)
    assert (
        await engine.assign_groups("t", "a", "10.0.0.3", [], session_timeout_ms=1, now_ms=120_001)
        == ()
    )


async def test_no_groups_gives_185(catalog, brokers):
    raw = await RawClient.open(catalog.ports[1])
    await raw.login("app1", catalog.token)
    coordinator = (await raw.call(FindCoordinatorRequest(topics=("orders",), app="app1"))).payload
    await raw.close()
    raw = await RawClient.open(catalog.ports[coordinator.entries[0].broker.id])
    await raw.call(AddConnectionRequest(app="app1", token=catalog.token, region="far-away"))
    reply = await raw.call(assign_request("orders", nearby=True))
    assert reply.payload.topics[0].code == Code.FW_COORDINATOR_PARTITION_ASSIGNOR_NO_PARTITIONS
    await raw.close()
