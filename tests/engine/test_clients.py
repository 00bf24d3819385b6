"""Clients: an app's connected hosts and what they produced or consumed, whatever the
front-end, across processes; a dead process's connections stop counting."""

from __future__ import annotations

import time

from brokers.engine import Engine, Message
from brokers.engine.clients import KEEP_MS, app_key
from brokers.engine.errors import ClientNotAllowed
from brokers.engine.keys import holders_key
from tests.engine.conftest import snapshot

JAVA = ("jmq4", "JAVA", "4.2.3")


def _two_apps(**producer: object):
    return snapshot(
        topics={"t": {"partitions": 1}, "u": {"partitions": 1}},
        producers=[
            {"topic": "t", "app": "a", **producer},
            {"topic": "u", "app": "a"},
            {"topic": "t", "app": "b"},
        ],
        consumers=[{"topic": "t", "app": "a"}],
    )


async def _produce(engine: Engine, topic: str, app: str, address: str) -> None:
    await engine.append(topic, app, [Message(b"x")], client_address=address)


async def test_a_connected_client_shows_what_it_said_and_what_it_did(make_engine):
    engine = make_engine(_two_apps())
    engine.client_connected("10.0.0.1:5000", "a", *JAVA)
    before = int(time.time() * 1000)
    await _produce(engine, "t", "a", "10.0.0.1:5000")
    await engine.fetch("t", "a", count=1, address="10.0.0.1:5000")
    (row,) = (await engine.clients_of(["a"]))["a"]
    assert (row.host, row.protocol, row.language, row.version) == ("10.0.0.1", *JAVA)
    assert row.connections == 1
    assert sorted((t, r) for t, r, _ in row.topics) == [("t", "consume"), ("t", "produce")]
    assert all(at >= before for _, _, at in row.topics)
    engine.client_disconnected("10.0.0.1:5000")
    (row,) = (await engine.clients_of(["a"]))["a"]
    assert row.connections == 0  # gone, but what it did is remembered under its kind
    assert (row.protocol, len(row.topics)) == ("jmq4", 2)


async def test_connections_add_up_over_processes_and_a_dead_one_stops_counting(make_engine, store):
    one, two, three = make_engine(_two_apps()), make_engine(_two_apps()), make_engine(_two_apps())
    for port in (1, 2):
        one.client_connected(f"10.0.0.1:{port}", "a", *JAVA)
    two.client_connected("10.0.0.1:3", "a", *JAVA)
    three.client_connected("10.0.0.1:4", "a", *JAVA)
    for engine in (one, two, three):
        await engine.clients.flush()
    (row,) = (await one.clients_of(["a"]))["a"]
    assert row.connections == 4
    await two.close()  # a process that stops withdraws its connections
    await store.zadd(holders_key(), {three.holders.id: 1})  # one that died lapses
    (row,) = (await one.clients_of(["a"]))["a"]
    assert row.connections == 2
    fields = await store.hkeys(app_key("a"))
    assert not [f for f in fields if three.holders.id.encode() in f]  # cleaned on the read


async def test_a_client_without_connections_is_listed_by_what_it_said(make_engine):
    engine = make_engine(_two_apps())
    engine.client_described("10.0.0.9:40000", "a", "http-mq", version="curl/8.5.0")
    await _produce(engine, "t", "a", "10.0.0.9")
    await _produce(engine, "t", "b", "10.0.0.7")  # a front-end that said nothing
    rows = await engine.clients_of(["a", "b", "c"])
    (a,) = rows["a"]
    assert (a.host, a.protocol, a.version, a.connections) == (
        "10.0.0.9",
        "http-mq",
        "curl/8.5.0",
        0,
    )
    (b,) = rows["b"]
    assert (b.host, b.protocol) == ("10.0.0.7", "")
    assert rows["c"] == []


async def test_refused_and_unaddressed_calls_are_not_activity(make_engine):
    engine = make_engine(_two_apps(blacklist=("10.9.0.0/16",)))
    try:
        await _produce(engine, "t", "a", "10.9.1.1:1")
    except ClientNotAllowed:
        pass
    else:
        raise AssertionError("the blacklist let it through")
    await engine.append("t", "a", [Message(b"x")])  # no address: not a client's
    assert (await engine.clients_of(["a"]))["a"] == []


async def test_the_inventory_counts_each_kind_of_client_once_per_app_and_host(make_engine):
    engine = make_engine(_two_apps())
    engine.client_connected("10.0.0.1:1", "a", *JAVA)
    engine.client_connected("10.0.0.2:1", "a", *JAVA)
    engine.client_connected("10.0.0.3:1", "b", *JAVA)
    engine.client_connected("10.0.0.4:1", "b", "vibemq", "", "1.0 | evil\x00")
    await _produce(engine, "t", "b", "10.0.0.4:1")
    inventory = await engine.client_inventory()
    assert [(i.protocol, i.language, i.version) for i in inventory] == [
        JAVA,
        ("vibemq", "", "1.0  evil"),
    ]
    java, vibe = inventory
    assert (java.apps, java.hosts, java.connections) == (
        {"a", "b"},
        {"10.0.0.1", "10.0.0.2", "10.0.0.3"},
        3,
    )
    assert (vibe.apps, vibe.connections) == ({"b"}, 1)
    assert vibe.last_ms > 0 and java.last_ms == 0


async def test_activity_a_week_old_is_forgotten(make_engine, store):
    engine = make_engine(_two_apps())
    old = int(time.time() * 1000) - KEEP_MS - 1
    await store.hset(app_key("a"), "a|10.0.0.1|jmq4|JAVA|1|t|produce", old)
    await store.sadd("mq:cl:apps", "a")
    assert (await engine.clients_of(["a"]))["a"] == []
    assert await store.exists(app_key("a")) == 0
    assert await engine.client_inventory() == []
    assert await store.smembers("mq:cl:apps") == set()


async def test_a_forwarded_address_is_cleaned_as_what_clients_state(make_engine):
    engine = make_engine(_two_apps())
    odd = "10.0.0.5|x\x01" + "y" * 100  # what a trusted proxy's header may say
    engine.client_described(odd, "a", "http-mq", version="v")
    await _produce(engine, "t", "a", odd)
    (row,) = (await engine.clients_of(["a"]))["a"]
    assert row.host == ("10.0.0.5x" + "y" * 100)[:64] and row.protocol == "http-mq"
