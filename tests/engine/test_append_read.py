"""Append and read: indexes, batches, partition choice, bounds, errors."""

from __future__ import annotations

import pytest

from brokers.engine import (
    BatchItem,
    BrokerNotWritable,
    ClientNotAllowed,
    IndexOutOfRange,
    InvalidMessage,
    Message,
    MessageTooLarge,
    NoWritablePartition,
    PartitionNotFound,
    ProducerNotFound,
    TopicNotFound,
    decode_record,
    encode_record,
)
from brokers.engine.append import java_hash
from tests.engine.conftest import PartitionGroupInfo, snapshot


async def test_indexes_are_contiguous_per_partition(make_engine, clock):
    engine = make_engine()
    r1 = await engine.append("t", "a", [Message(b"x"), Message(b"y")], partition=1)
    r2 = await engine.append("t", "a", [Message(b"z")], partition=1)
    assert (r1.partition, r1.first_index, r1.indexes, r1.count) == (1, 0, (0, 1), 2)
    assert (r2.first_index, r2.indexes) == (2, (2,))
    assert await engine.bounds("t", 1) == (0, 3)
    assert await engine.bounds("t", 0) == (0, 0)
    got = await engine.read("t", 1, 0, 10)
    assert [d.message.body for d in got] == [b"x", b"y", b"z"]
    stored = got[2].message
    assert (stored.partition, stored.index, stored.app) == (1, 2, "a")
    assert stored.store_time_ms == int(clock.now * 1000)


async def test_batch_takes_consecutive_indexes_and_is_stored_once(make_engine):
    engine = make_engine()
    await engine.append("t", "a", [Message(b"before")], partition=0)
    batch = Message.batch([BatchItem(b"i0"), BatchItem(b"i1", business_id="k"), BatchItem(b"i2")])
    res = await engine.append("t", "a", [batch, Message(b"after")], partition=0)
    assert res.indexes == (1, 4) and res.count == 4
    assert await engine.bounds("t", 0) == (0, 5)
    # reading an index inside the batch returns the whole batch
    inside = await engine.read("t", 0, 2, 1)
    assert len(inside) == 1 and (inside[0].index, inside[0].count) == (1, 3)
    items = inside[0].message.items()
    assert [i.body for i in items] == [b"i0", b"i1", b"i2"] and items[1].business_id == "k"
    after = await engine.read("t", 0, 4, 5)
    assert [d.message.body for d in after] == [b"after"]
    assert await engine.read("t", 0, 5, 5) == []


async def test_read_entries_returns_whole_appends(make_engine):
    """Bulk readers get each append's records back to back: one element per append."""
    engine = make_engine()
    await engine.append("t", "a", [Message(b"m0")], partition=0)
    batch = Message.batch([BatchItem(b"i0"), BatchItem(b"i1")])
    await engine.append("t", "a", [batch, Message(b"m3"), Message(b"m4")], partition=0)
    await engine.append("t", "a", [Message(b"m5")], partition=0)
    entries = await engine.read_entries("t", 0, 2, 2)  # starts inside the second append
    assert [(e.index, e.count) for e in entries] == [(1, 4)]
    records = await engine.read("t", 0, 1, 4)
    assert entries[0].records == b"".join(d.record for d in records)
    rest = await engine.read_entries("t", 0, 0, 100)
    assert [(e.index, e.count) for e in rest] == [(0, 1), (1, 4), (5, 1)]
    assert await engine.read_entries("t", 0, 6, 10) == []
    with pytest.raises(IndexOutOfRange):
        await engine.read_entries("t", 0, 7, 1)


async def test_read_out_of_range_is_a_clear_error(make_engine):
    engine = make_engine()
    await engine.append("t", "a", [Message(b"x")], partition=0)
    with pytest.raises(IndexOutOfRange) as err:
        await engine.read("t", 0, 2, 1)
    assert (err.value.min_index, err.value.max_index) == (0, 1)
    with pytest.raises(IndexOutOfRange):
        await engine.read("t", 0, -1, 1)
    with pytest.raises(PartitionNotFound):
        await engine.read("t", 9, 0, 1)
    with pytest.raises(TopicNotFound):
        await engine.read("nope", 0, 0, 1)


async def test_append_rejects_bad_input(make_engine):
    engine = make_engine(max_body=100)
    with pytest.raises(MessageTooLarge):
        await engine.append("t", "a", [Message(b"x" * 101)], partition=0)
    with pytest.raises(InvalidMessage):
        await engine.append("t", "a", [Message(b"x", business_id="b" * 101)], partition=0)
    with pytest.raises(InvalidMessage):
        await engine.append("t", "a", [], partition=0)
    with pytest.raises(InvalidMessage):
        await engine.append("t", "a", [b"\x00\x00\x00\x05garbage"], partition=0)
    with pytest.raises(ProducerNotFound):
        await engine.append("t", "stranger", [Message(b"x")])
    with pytest.raises(TopicNotFound):
        await engine.append("nope", "a", [Message(b"x")])
    with pytest.raises(PartitionNotFound):
        await engine.append("t", "a", [Message(b"x")], partition=4)
    assert await engine.bounds("t", 0) == (0, 0)  # nothing stored by failed calls


async def test_producer_blacklist(make_engine):
    snap = snapshot(producers=[{"topic": "t", "app": "a", "blacklist": ("10.0.0.0/8",)}])
    engine = make_engine(snap)
    with pytest.raises(ClientNotAllowed):
        await engine.append("t", "a", [Message(b"x")], client_address="10.1.2.3:999")
    ok = await engine.append("t", "a", [Message(b"x")], client_address="192.168.1.1:5")
    assert ok.count == 1


async def test_raw_jmq4_record_is_restamped(make_engine, clock):
    engine = make_engine()
    raw, _ = encode_record(
        Message(b"wire", attributes={"k": "v"}, send_time_ms=1000), app="a", partition=-1, now_ms=0
    )
    res = await engine.append("t", "a", [raw], partition=3, client_address="127.0.0.1:8080")
    [d] = await engine.read("t", 3, 0, 1)
    msg = decode_record(d.record)
    assert (msg.partition, msg.index, msg.body, msg.attributes) == (
        3,
        res.first_index,
        b"wire",
        {"k": "v"},
    )
    assert msg.client_address == "127.0.0.1:8080"
    assert msg.send_time_ms == 1000
    # the stored bytes differ from the wire only in partition, index, clientIp and storeTime
    assert len(d.record) == len(raw) and d.record[51:] == raw[51:]


async def test_sequential_topic_hashes_business_id(make_engine):
    snap = snapshot(topics={"s": {"partitions": 5, "type": "sequential"}})
    engine = make_engine(snap)
    for key in ["order-1", "order-2", "x"]:
        res = await engine.append("s", "a", [Message(b"m", business_id=key)])
        assert res.partition == abs(java_hash(key)) % 5
    res = await engine.append("s", "a", [Message(b"m")])
    assert res.partition == 0
    assert java_hash("hello") == 99162322 and java_hash("polygenelubricants") == -2147483648


async def test_weights_and_writable_partitions(make_engine):
    groups = (
        PartitionGroupInfo(group_id=0, leader=1, partitions=(0, 1)),
        PartitionGroupInfo(group_id=1, leader=2, partitions=(2, 3)),
    )
    snap = snapshot(
        topics={"t": {"partitions": 4, "groups": groups}},
        brokers={1: {}, 2: {"writable": False}},
    )
    engine = make_engine(snap)
    seen = {(await engine.append("t", "a", [Message(b"m")])).partition for _ in range(30)}
    assert seen <= {0, 1}
    with pytest.raises(BrokerNotWritable):
        await engine.append("t", "a", [Message(b"m")], partition=2)
    weighted = snapshot(
        topics={"t": {"partitions": 4, "groups": groups}},
        brokers={1: {}, 2: {}},
        producers=[{"topic": "t", "app": "a", "weights": {1: 0, 2: 5}}],
    )
    engine.set_snapshot(weighted)
    seen = {(await engine.append("t", "a", [Message(b"m")])).partition for _ in range(30)}
    assert seen <= {2, 3}
    dead = snapshot(
        topics={"t": {"partitions": 4, "groups": groups}},
        brokers={1: {"alive": False}, 2: {"writable": False}},
    )
    engine.set_snapshot(dead)
    with pytest.raises(NoWritablePartition):
        await engine.append("t", "a", [Message(b"m")])


async def test_index_at_time(make_engine, clock):
    engine = make_engine()
    times = []
    for i in range(20):
        times.append(int(clock.now * 1000))
        batch = Message.batch([BatchItem(b"a"), BatchItem(b"b")]) if i % 3 == 0 else Message(b"m")
        await engine.append("t", "a", [batch], partition=0)
        clock.advance(1)
    indexes = [d.index for d in await engine.read("t", 0, 0, 100)]
    for t, idx in zip(times, indexes, strict=True):
        assert await engine.index_at_time("t", 0, t) == idx
        assert await engine.index_at_time("t", 0, t - 500) == idx
    assert await engine.index_at_time("t", 0, 0) == 0
    assert await engine.index_at_time("t", 0, times[-1] + 1) == (await engine.bounds("t", 0))[1]


async def test_two_writers_on_one_partition_get_correct_indexes(make_engine):
    # each engine guesses the next index from its own last append; the other writer
    # makes the guess wrong, and the script must then rewrite the records' indexes
    one, two = make_engine(), make_engine()
    for round_ in range(3):
        a = await one.append("t", "a", [Message(b"one"), Message(b"one")], partition=2)
        b = await two.append(
            "t", "a", [Message.batch([BatchItem(b"two")] * 3), Message(b"two")], partition=2
        )
        assert a.first_index == round_ * 6 and b.indexes == (round_ * 6 + 2, round_ * 6 + 5)
    records = await one.read("t", 2, 0, 100)
    assert [(d.index, d.count) for d in records][:4] == [(0, 1), (1, 1), (2, 3), (5, 1)]
    assert all(d.message.index == d.index and d.message.partition == 2 for d in records)
    assert sum(d.count for d in records) == 18
    inside = await one.read("t", 2, 3, 1)  # index inside a batch inside an append call
    assert [(d.index, d.count) for d in inside] == [(2, 3)]


async def test_unreachable_redis_is_store_unavailable():
    import redis.asyncio as aioredis

    from brokers.engine import Engine, StoreUnavailable
    from tests.scripts_path import free_port

    client = aioredis.from_url(f"redis://127.0.0.1:{free_port()}/0", socket_connect_timeout=0.5)
    engine = Engine(client, lambda: snapshot())
    with pytest.raises(StoreUnavailable):
        await engine.append("t", "a", [Message(b"x")], partition=0)
    with pytest.raises(StoreUnavailable):
        await engine.fetch("t", "a")
    await client.aclose()


SEND_MS = 1_749_999_999_950  # 50 ms before the fake clock


def _wire_blob(*bodies: bytes, send_time_ms: int = SEND_MS) -> tuple[bytes, list[bytes]]:
    records = [
        encode_record(Message(b, send_time_ms=send_time_ms), app="a", partition=-1, now_ms=0)[0]
        for b in bodies
    ]
    return b"".join(records), records


async def test_wire_blob_is_checked_once_and_stamped_in_place(make_engine, clock):
    engine = make_engine()
    await engine.append("t", "a", [Message(b"before")], partition=2)
    blob, records = _wire_blob(b"w0", b"w1", b"w2")
    wire = engine.check_wire(blob, 3)
    res = await engine.append("t", "a", wire, partition=2, client_address="10.9.8.7:6")
    assert (res.partition, res.first_index, res.indexes, res.count) == (2, 1, (1, 2, 3), 3)
    got = await engine.read("t", 2, 1, 10)
    assert [d.index for d in got] == [1, 2, 3]
    for d, raw in zip(got, records, strict=True):
        msg = decode_record(d.record)
        assert (msg.partition, msg.index, msg.client_address) == (2, d.index, "10.9.8.7:6")
        assert msg.store_time_ms == int(clock.now * 1000) and msg.send_time_ms == SEND_MS
        assert d.record[47:51] != raw[47:51]  # the wire's storeTime was patched
        assert d.record[51:] == raw[51:] and d.record[14:20] == raw[14:20]
    # a wrong index guess (another writer appended meanwhile) is fixed by the script
    other = make_engine()
    await other.append("t", "a", [Message(b"other")], partition=2)
    res = await engine.append("t", "a", engine.check_wire(blob, 3), partition=2)
    assert res.indexes == (5, 6, 7)
    assert [d.index for d in await engine.read("t", 2, 5, 3)] == [5, 6, 7]
    assert [decode_record(d.record).index for d in await engine.read("t", 2, 5, 3)] == [5, 6, 7]


async def test_wire_batch_takes_its_items_indexes(make_engine):
    engine = make_engine()
    batch, _ = encode_record(Message.batch([BatchItem(b"i0"), BatchItem(b"i1")]), app="a", now_ms=0)
    plain, _ = _wire_blob(b"p")
    res = await engine.append("t", "a", engine.check_wire(batch + plain, 2), partition=0)
    assert res.indexes == (0, 2) and res.count == 3
    assert await engine.bounds("t", 0) == (0, 3)


async def test_invalid_wire_records_store_nothing(make_engine):
    engine = make_engine(max_body=10)
    blob, records = _wire_blob(b"ok", b"fine")
    too_big, _ = _wire_blob(b"x" * 11)
    bad_magic = bytearray(records[1])
    bad_magic[18:20] = b"\x00\x00"
    for bad, count, error in (
        (blob + too_big, 3, MessageTooLarge),
        (records[0] + bytes(bad_magic), 2, InvalidMessage),
        (blob[:-1], 2, InvalidMessage),
        (blob, 3, InvalidMessage),
    ):
        with pytest.raises(error):
            engine.check_wire(bad, count)
    # raw records given as bytes take the same checks inside append
    with pytest.raises(MessageTooLarge):
        await engine.append("t", "a", [records[0], too_big], partition=0)
    with pytest.raises(InvalidMessage):
        await engine.append("t", "a", [records[0][:-1], records[1]], partition=0)
    with pytest.raises(InvalidMessage):  # one record split over two items
        await engine.append("t", "a", [blob[:10], blob[10:]], partition=0)
    assert await engine.bounds("t", 0) == (0, 0)
    ok = await engine.append("t", "a", records, partition=0)
    assert ok.indexes == (0, 1)


async def test_wire_records_in_a_transaction(make_engine):
    engine = make_engine()
    tx = await engine.prepare_transaction("t", "a", timeout_ms=60_000)
    blob, _ = _wire_blob(b"t0", b"t1")
    logged = await engine.append_to_transaction(
        "t", "a", tx, engine.check_wire(blob, 2), partition=1, client_address="10.0.0.1:1"
    )
    assert logged == 2
    assert await engine.bounds("t", 1) == (0, 0)
    assert await engine.commit_transaction("t", "a", tx) == {1: 0}
    got = await engine.read("t", 1, 0, 5)
    assert [d.message.body for d in got] == [b"t0", b"t1"]
    assert [d.message.index for d in got] == [0, 1]
    assert {d.message.client_address for d in got} == {"10.0.0.1:1"}
