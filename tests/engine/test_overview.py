"""Lag and produce rates of many groups and topics: the numbers progress() gives one by one,
in a fixed number of Redis round trips (single Redis and Redis Cluster)."""

from __future__ import annotations

from brokers.engine import Message
from tests.engine.conftest import snapshot


def catalog(groups: int = 30):
    topics = {f"t{i}": {"partitions": 3} for i in range(groups)}
    consumers = [{"topic": f"t{i}", "app": "a"} for i in range(groups)]
    consumers += [{"topic": "t0", "app": "b"}]
    return snapshot(topics=topics, consumers=consumers)


async def test_group_lags_match_progress(make_engine, clock):
    engine = make_engine(catalog())
    for i in range(30):
        for p in range(3):
            if i + p:
                await engine.append(f"t{i}", "a", [Message(b"x")] * (i + p), partition=p)
        clock.advance(1)
    got = await engine.fetch("t5", "a", count=3, owner="o", address="10.0.0.1:1")
    await engine.ack("t5", "a", got.partition, [d.index for d in got.messages])
    groups = [(f"t{i}", "a") for i in range(30)] + [("t0", "b"), ("missing", "a")]
    lags = await engine.group_lags(groups)
    assert ("missing", "a") not in lags
    for topic, app in groups[:-1]:
        rows = await engine.progress(topic, app)
        assert lags[(topic, app)].lag == sum(max(r.lag, 0) for r in rows), topic
    assert lags[("t0", "a")].lag == 3 and lags[("t0", "a")].lagging_partitions == 2


async def test_progress_of_many_groups_in_one_round_trip(make_engine, store, monkeypatch):
    """What progress() reads one group at a time (the blocked-consumer check reads
    thousands of sequential consumers every 30 s)."""
    engine = make_engine(catalog())
    for i in range(30):
        await engine.append(f"t{i}", "a", [Message(b"x")] * (i % 3 + 1), partition=i % 3)
    got = await engine.fetch("t4", "a", count=1, owner="o", address="10.0.0.1:1")
    await engine.ack("t4", "a", got.partition, [d.index for d in got.messages])
    groups = [(f"t{i}", "a") for i in range(30)] + [("t0", "b"), ("missing", "a")]
    executions = count_round_trips(store, monkeypatch)
    many = await engine.groups_progress(groups)
    assert executions[0] == 1
    assert ("missing", "a") not in many and len(many) == 31
    for topic, app in groups[:-1]:
        one = await engine.progress(topic, app)
        assert many[(topic, app)] == one, topic
    assert [r.ack_index for r in many[("t4", "a")]][1] >= 1


async def test_oldest_unacked_is_the_first_waiting_message(make_engine, clock):
    engine = make_engine(snapshot(topics={"t": {"partitions": 2}}))
    first = clock.now
    await engine.append("t", "a", [Message(b"old")], partition=1)
    clock.advance(30)
    await engine.append("t", "a", [Message(b"new")] * 2, partition=0)
    lag = (await engine.group_lags([("t", "a")]))[("t", "a")]
    assert lag.lag == 3
    assert lag.oldest_unacked_ms == int(first * 1000)
    assert lag.oldest_age_ms(engine.now_ms()) == 30_000
    await engine.reset_offsets("t", "a", position="latest", partition=1)
    lag = (await engine.group_lags([("t", "a")]))[("t", "a")]
    assert lag.lag == 2 and lag.oldest_age_ms(engine.now_ms()) == 0


async def test_nothing_lags_without_messages(make_engine):
    engine = make_engine(snapshot(topics={"t": {"partitions": 4}}))
    lag = (await engine.group_lags([("t", "a")]))[("t", "a")]
    assert (lag.lag, lag.oldest_unacked_ms, lag.oldest_age_ms(engine.now_ms())) == (0, 0, None)


def count_round_trips(store, monkeypatch) -> list[int]:
    """From now on, ``[n]``: how many pipelines ``store`` executed."""
    executions = [0]
    original = type(store.pipeline(transaction=False)).execute

    async def counting(self, *args, **kwargs):
        executions[0] += 1
        return await original(self, *args, **kwargs)

    monkeypatch.setattr(type(store.pipeline(transaction=False)), "execute", counting)
    return executions


async def test_two_round_trips_for_many_groups(make_engine, store, monkeypatch):
    """One for the bounds and ack indexes, one for the first unacked records, whatever
    the number of groups."""
    engine = make_engine(catalog())
    for i in range(30):
        await engine.append(f"t{i}", "a", [Message(b"x")], partition=0)
    await engine.group_lags([("t0", "a")])  # a fresh Redis learns the script first
    executions = count_round_trips(store, monkeypatch)
    await engine.group_lags([(f"t{i}", "a") for i in range(30)])
    assert executions[0] == 2


async def test_a_broadcast_consumers_clients_cost_no_round_trip_each(
    make_engine, store, monkeypatch
):
    """Its clients' registry is one more round trip; then its 60 clients are read in the
    same two as one consumer, and their lags agree with progress()."""
    engine = make_engine(
        snapshot(
            topics={"t": {"partitions": 3}},
            consumers=[{"topic": "t", "app": "a", "broadcast": True, "start_position": "earliest"}],
        )
    )
    for p in range(3):
        await engine.append("t", "a", [Message(b"x")] * (p + 2), partition=p)
    for n in range(60):
        got = await engine.fetch("t", "a", count=n % 4, owner=f"c{n}", client_id=f"c{n}")
        await engine.ack(
            "t", "a", got.partition, [d.index for d in got.messages], client_id=f"c{n}"
        )
    await engine.group_lags([("t", "a")])  # a fresh Redis learns the script first
    executions = count_round_trips(store, monkeypatch)
    lags = (await engine.client_lags([("t", "a")]))[("t", "a")]
    assert executions[0] == 3 and len(lags) == 60
    monkeypatch.undo()
    for client, lag in lags.items():
        rows = await engine.progress("t", "a", client_id=client)
        assert lag.lag == sum(max(r.lag, 0) for r in rows), client


async def test_produce_rates_count_whole_minutes(make_engine, clock):
    clock.now = 1_750_000_020.0  # 20 s into a minute
    engine = make_engine(snapshot(topics={"t": {"partitions": 1}, "u": {"partitions": 1}}))
    await engine.append("t", "a", [Message(b"x")] * 120, partition=0)
    clock.advance(60)
    await engine.append("t", "a", [Message(b"x")] * 7, partition=0)  # the current minute
    rates = await engine.produce_rates(["t", "u"], minutes=5)
    assert rates["t"].produced == 120 and rates["t"].per_second == 120 / 300
    assert rates["u"].produced == 0


async def test_a_broadcast_consumers_lag_is_its_slowest_active_clients(make_engine, clock):
    """Each broadcast client has its progress and the group's own is never read: the
    consumer's lag is its slowest active client's (it was the group's own, everything
    stored, in every list and on the dashboard); a client gone for good does not count
    while others consume, and all count when none does (the consumer is down)."""
    engine = make_engine(
        snapshot(
            topics={"t": {"partitions": 1}},
            consumers=[{"topic": "t", "app": "a", "broadcast": True, "start_position": "earliest"}],
        )
    )
    assert (await engine.group_lags([("t", "a")]))[("t", "a")].lag == 0
    await engine.append("t", "a", [Message(b"x")] * 3, partition=0)

    async def consume(client: str, acked: int) -> None:
        got = await engine.fetch(
            "t", "a", count=3, owner=client, address="10.0.0.1:1", client_id=client
        )
        indexes = [d.index for d in got.messages][:acked]
        await engine.ack("t", "a", got.partition, indexes, client_id=client)

    await consume("c1", 3)
    await consume("c2", 1)
    lag = (await engine.group_lags([("t", "a")]))[("t", "a")]
    assert (lag.lag, lag.lagging_partitions) == (2, 1) and lag.oldest_unacked_ms > 0
    per_client = (await engine.client_lags([("t", "a")]))[("t", "a")]
    assert {c: v.lag for c, v in per_client.items()} == {"c1": 0, "c2": 2}
    clock.advance(11 * 60)  # c1 and c2 went away; c3 consumes everything
    await consume("c3", 3)
    assert (await engine.group_lags([("t", "a")]))[("t", "a")].lag == 0
    assert list((await engine.client_lags([("t", "a")]))[("t", "a")]) == ["c3"]
    clock.advance(11 * 60)  # nobody consumes: every client's backlog counts
    assert (await engine.group_lags([("t", "a")]))[("t", "a")].lag == 2


async def test_client_lags_of_a_clustering_consumer_are_the_groups_own(make_engine):
    engine = make_engine(catalog(2))
    await engine.append("t0", "a", [Message(b"x")] * 2, partition=0)
    lags = await engine.client_lags([("t0", "a"), ("t1", "a"), ("missing", "a")])
    assert set(lags) == {("t0", "a"), ("t1", "a")}
    assert {c: v.lag for c, v in lags[("t0", "a")].items()} == {None: 2}
