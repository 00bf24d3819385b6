"""What the store holds, for the capacity report: messages stored per topic from the
partitions' bounds (retention's trims taken off, a never-written partition 0), in
pipelined chunks whatever the fleet's size; each master's memory and keys."""

from __future__ import annotations

from brokers.engine import Message, store_usage
from tests.engine.conftest import snapshot


def catalog():
    return snapshot(
        topics={"t": {"partitions": 3, "retention_max_count": 2}, "u": {"partitions": 2}},
        producers=[{"topic": "t", "app": "a"}, {"topic": "u", "app": "a"}],
    )


async def test_stored_messages_per_topic_in_chunks(make_engine, monkeypatch):
    monkeypatch.setattr(store_usage, "CHUNK", 2)  # 5 partitions: three round trips
    engine = make_engine(catalog())
    for i in range(5):  # retention keeps 2 of partition 0's 5
        await engine.append("t", "a", [Message(b"m%d" % i)], partition=0)
    await engine.append("t", "a", [Message(b"one")], partition=2)
    await engine.append("u", "a", [Message(b"a"), Message(b"b")], partition=1)
    await engine.trim("t")
    stored = await engine.stored_messages([("t", 3), ("u", 2), ("never", 4)])
    assert stored == {"t": 3, "u": 2, "never": 0}
    assert await engine.stored_messages([]) == {}


async def test_store_nodes_report_memory_and_keys(make_engine):
    engine = make_engine(catalog())
    await engine.append("u", "a", [Message(b"a")], partition=0)
    nodes = await engine.store_nodes()  # one, or each master of a Redis Cluster
    assert nodes and all(n.used_bytes > 0 and n.max_bytes >= 0 and ":" in n.name for n in nodes)
    assert sum(n.keys for n in nodes) > 0
