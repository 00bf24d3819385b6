"""A broadcast client's retries are its own: what it fails comes back to it, not to
another client of the group (which had the message already); a re-consume reaches one
client or each; dead letters stay the group's. Clustering consumers share the group's."""

from __future__ import annotations

import pytest

from brokers.engine import (
    RETRY_PARTITION,
    ClientIdNotAllowed,
    InvalidMessage,
    Message,
    RetryPolicy,
    RetryType,
    SpanTooLarge,
)
from brokers.engine.sections import pull
from tests.engine.conftest import snapshot

BROADCAST = snapshot(
    topics={"t": {"partitions": 1}},
    consumers=[{"topic": "t", "app": "a", "broadcast": True, "start_position": "earliest"}],
)


async def _consume_all(engine, client: str) -> list:
    """Everything ``client`` gets now, acked."""
    got = []
    while (r := await engine.fetch("t", "a", client_id=client, owner=client)).found:
        got += r.messages
        await engine.ack(
            "t", "a", r.partition, range(r.start, r.end), client_id=client, owner=client
        )
    return got


async def test_a_broadcast_clients_failed_message_comes_back_to_it_alone(make_engine, clock):
    engine = make_engine(BROADCAST, retry_policy=RetryPolicy(base_ms=1_000, cap_ms=1_000))
    await engine.append("t", "a", [Message(b"job")], partition=0)
    assert [d.message.body for d in await _consume_all(engine, "y")] == [b"job"]
    got = await engine.fetch("t", "a", client_id="x", owner="x")
    await engine.ack(
        "t", "a", 0, [got.messages[0].index], retry_type=RetryType.EXCEPTION, client_id="x",
        owner="x",
    )  # fmt: skip
    assert await engine.retry_counts("t", "a", client_id="x") == (1, 0)
    assert await engine.retry_counts("t", "a") == (0, 0)  # not the group's
    clock.advance(1.1)
    assert await _consume_all(engine, "y") == []  # y had it already
    again = await engine.fetch("t", "a", client_id="x", owner="x")
    assert again.partition == RETRY_PARTITION and again.messages[0].message.body == b"job"
    acked = await engine.ack(
        "t", "a", RETRY_PARTITION, [again.messages[0].index], client_id="x", owner="x"
    )
    assert acked.status.name == "OK"
    assert await engine.retry_counts("t", "a", client_id="x") == (0, 0)


async def test_a_push_members_own_retry_backs_off_in_its_store_then_dies_in_the_groups(
    make_engine, clock
):
    engine = make_engine(
        snapshot(
            topics={"t": {"partitions": 1}},
            consumers=[{"topic": "t", "app": "a", "broadcast": True, "err_times": 2}],
        ),
        retry_policy=RetryPolicy(base_ms=1_000, cap_ms=1_000),
    )
    await engine.append("t", "a", [Message(b"job")], partition=0)
    for member in ("m1", "m2"):  # both consumed it
        [d] = (await engine.lease("t", "a", count=1, owner="o", client_id=member)).deliveries
        assert await engine.settle("t", "a", 0, [d.index], client_id=member) == 1
    assert await engine.reconsume("t", "a", 0, 0, 1, client_id="m1") == 1
    [first] = (await engine.lease("t", "a", count=1, owner="o", client_id="m1")).deliveries
    assert first.partition == RETRY_PARTITION and first.message.body == b"job"
    assert await engine.fail("t", "a", RETRY_PARTITION, [first.index], client_id="m1") == 1
    assert await engine.retry_counts("t", "a", client_id="m1") == (1, 0)
    clock.advance(1.1)
    assert (await engine.lease("t", "a", count=1, owner="o", client_id="m2")).deliveries == []
    [back] = (await engine.lease("t", "a", count=1, owner="o", client_id="m1")).deliveries
    assert (back.index, back.attempts) == (first.index, first.attempts + 1)
    assert await engine.fail("t", "a", RETRY_PARTITION, [back.index], client_id="m1") == 1
    # past err_times: a dead letter of the consumer, as every client's retries are
    assert await engine.retry_counts("t", "a", client_id="m1") == (0, 1)
    [dead] = await engine.dead_letters("t", "a")
    assert dead.message.body == b"job"


async def test_a_groups_retry_goes_to_whichever_client_asks_first(make_engine, clock):
    """An operator's copy (or a resent dead letter) is the group's: one client gets it."""
    engine = make_engine(BROADCAST, retry_policy=RetryPolicy(base_ms=1_000, cap_ms=1_000))
    await engine.append("t", "a", [Message(b"job")], partition=0)
    for member in ("m1", "m2"):
        [d] = (await engine.lease("t", "a", count=1, owner="o", client_id=member)).deliveries
        await engine.settle("t", "a", 0, [d.index], client_id=member)
    await engine.retry("t", "a", 0, [0])
    clock.advance(1.1)
    [got] = (await engine.lease("t", "a", count=1, owner="o", client_id="m2")).deliveries
    assert got.partition == RETRY_PARTITION
    assert (await engine.lease("t", "a", count=1, owner="o", client_id="m1")).deliveries == []
    assert await engine.settle("t", "a", RETRY_PARTITION, [got.index], client_id="m2") == 1
    assert await engine.retry_counts("t", "a") == (0, 0)


async def test_a_reconsume_reaches_each_client_or_the_one_named(make_engine, clock):
    engine = make_engine(BROADCAST)
    start = engine.now_ms()
    await engine.append("t", "a", [Message(b"m0"), Message(b"m1")], partition=0)
    clock.advance(1)
    end = engine.now_ms()
    for client in ("x", "y"):
        assert len(await _consume_all(engine, client)) == 2
    assert await engine.reconsumers("t", "a") == ["x", "y"]
    assert await engine.reconsumers("t", "a", "x") == ["x"]
    spans = await engine.reconsume_spans("t", "a", from_ms=start, to_ms=end, clients=2)
    assert spans == {0: (0, 2)}
    assert await engine.reconsume("t", "a", 0, 0, 2, client_id="x") == 2
    again = await _consume_all(engine, "x")
    assert [d.message.body for d in again] == [b"m0", b"m1"]
    assert {d.partition for d in again} == {RETRY_PARTITION}
    assert await _consume_all(engine, "y") == []  # x's re-consume, not y's
    assert await engine.reconsume("t", "a", 0, 0, 2, client_id="y") == 2
    pushed = (await engine.lease("t", "a", count=5, owner="o", client_id="y")).deliveries
    assert [d.message.body for d in pushed] == [b"m0", b"m1"]


async def test_reconsume_rules_for_clients(make_engine, clock, monkeypatch):
    engine = make_engine(BROADCAST)
    with pytest.raises(InvalidMessage, match="no client yet"):
        await engine.reconsumers("t", "a")
    clustering = make_engine(snapshot(topics={"t": {"partitions": 1}}))
    assert await clustering.reconsumers("t", "a") == [None]
    with pytest.raises(ClientIdNotAllowed):
        await clustering.reconsumers("t", "a", "x")
    with pytest.raises(ClientIdNotAllowed):
        await clustering.reconsume("t", "a", 0, 0, 1, client_id="x")
    monkeypatch.setattr(pull, "RECONSUME_MAX", 3)
    start = engine.now_ms()
    await engine.append("t", "a", [Message(b"a"), Message(b"b")], partition=0)
    clock.advance(1)
    assert await engine.reconsume_spans("t", "a", from_ms=start, to_ms=engine.now_ms())
    with pytest.raises(SpanTooLarge):  # two messages for each of two clients: four
        await engine.reconsume_spans("t", "a", from_ms=start, to_ms=engine.now_ms(), clients=2)


async def test_a_member_that_leaves_for_good_takes_its_retries_along(make_engine):
    engine = make_engine(BROADCAST)
    await engine.append("t", "a", [Message(b"job")], partition=0)
    for member in ("m1", "m2"):
        assert await engine.reconsume("t", "a", 0, 0, 1, client_id=member) == 1
    await engine.leave("t", "a", "m1")
    assert await engine.retry_counts("t", "a", client_id="m1") == (0, 0)
    await engine.leave("t", "a", "m2", keep_ms=60_000)  # durable: may come back
    assert await engine.retry_counts("t", "a", client_id="m2") == (1, 0)
