"""The source's building blocks without Spark: options, splits, rows from the engine."""

from __future__ import annotations

import asyncio

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable

from brokers.engine import (
    BatchItem,
    CatalogSnapshot,
    Engine,
    Message,
    ProducerPolicyInfo,
    TopicInfo,
)
from pipeline.options import OptionError, decode_catalog, encode_catalog, int_option, select_topics
from pipeline.reading import COLUMNS, Split, StoreGone, StoreReader, split_range
from pipeline.source import SCHEMA, MqcloudBatchReader, MqcloudStreamReader

SNAP = CatalogSnapshot(
    topics={
        "t": TopicInfo(code="t", partitions=2, archive=True),
        "u": TopicInfo(code="u", partitions=1),
    },
    producers=(ProducerPolicyInfo(name="a.t", topic="t", app="a"),),
)


def test_catalog_option_round_trip_and_errors():
    snap = decode_catalog(encode_catalog(SNAP, ["t"]))
    assert list(snap.topics) == ["t"] and snap.topics["t"].archive
    assert snap.producers == ()  # only topics travel to the workers
    assert [t.code for t in select_topics(decode_catalog(encode_catalog(SNAP)), None)] == ["t", "u"]
    for bad in (None, "", "{", '{"topics": {"t": {"code": "x", "partitions": 1}}}',
                '{"topics": {"t": {"code": "t", "partitions": 0}}}'):  # fmt: skip
        with pytest.raises(OptionError):
            decode_catalog(bad)
    with pytest.raises(OptionError, match="not in the catalog"):
        select_topics(SNAP, "t,missing")
    assert [t.code for t in select_topics(SNAP, " u , t,u")] == ["u", "t"]
    assert int_option({"n": "5"}, "n", 1) == 5
    assert int_option({}, "n", 7) == 7
    for raw in ("x", "-1", "1.5"):
        with pytest.raises(OptionError):
            int_option({"n": raw}, "n", 1)


def test_reader_options_are_validated(redis_url):
    good = {"redis_url": redis_url, "catalog": encode_catalog(SNAP)}
    MqcloudBatchReader(good)
    with pytest.raises(OptionError, match="redis_url"):
        MqcloudBatchReader({**good, "redis_url": "http://x"})
    with pytest.raises(OptionError, match="split_size"):
        MqcloudBatchReader({**good, "split_size": "0"})
    with pytest.raises(OptionError, match="batch options"):
        MqcloudStreamReader({**good, "from_ms": "1"})
    assert [f.name for f in SCHEMA.fields] == list(COLUMNS)


def test_split_range():
    assert split_range("t", 1, 5, 5, 3) == []
    assert split_range("t", 1, 5, 12, 3) == [
        Split("t", 1, 5, 8), Split("t", 1, 8, 11), Split("t", 1, 11, 12)
    ]  # fmt: skip


async def collect(reader: StoreReader, split: Split) -> list[tuple]:
    return [row async for rows in reader.rows(split, chunk=2) for row in rows]


async def test_rows_expand_batches_and_skip_trimmed(redis_client, redis_url):
    engine = Engine(redis_client, lambda: SNAP)
    await engine.append(
        "t", "a", [Message(b"m0", business_id="b0", attributes={"k": "v"})], partition=0
    )
    items = [
        BatchItem(b"i0", "bi0"),
        BatchItem(b"i1", "bi1", {"x": "1"}, 3),
        BatchItem(b"i2", "bi2"),
    ]
    await engine.append("t", "a", [Message.batch(items)], partition=0)  # indexes 1..3
    await engine.append("t", "a", [Message(b"m4"), Message(b"m5")], partition=0)
    await engine.close()
    reader = StoreReader(redis_url, SNAP)
    try:
        rows = await collect(reader, Split("t", 0, 0, 6))
        assert [(r[2], r[4], r[6]) for r in rows] == [
            (0, "b0", b"m0"), (1, "bi0", b"i0"), (2, "bi1", b"i1"), (3, "bi2", b"i2"),
            (4, "", b"m4"), (5, "", b"m5"),
        ]  # fmt: skip
        assert rows[0][5] == {"k": "v"} and rows[2][5] == {"x": "1"} and rows[2][7] == 3
        assert all(r[0] == "t" and r[1] == 0 and r[3] == "a" for r in rows)
        assert all(r[9] >= r[8] > 0 for r in rows)  # store time ≥ send time, in ms
        # a split starting or ending inside the batch gets exactly its own indexes
        assert [r[2] for r in await collect(reader, Split("t", 0, 2, 5))] == [2, 3, 4]
        assert [r[2] for r in await collect(reader, Split("t", 0, 0, 2))] == [0, 1]
        # trimmed indexes are skipped; a range past the end is an error, never silence
        trimmed = CatalogSnapshot(
            topics={"t": TopicInfo(code="t", partitions=2, retention_max_count=2)}
        )
        await Engine(redis_client, lambda: trimmed).trim("t")
        assert [r[2] for r in await collect(reader, Split("t", 0, 0, 6))] == [4, 5]
        with pytest.raises(StoreGone):
            await collect(reader, Split("t", 0, 4, 9))
        assert await reader.index_range("t", 1, None, None) == (0, 0)
    finally:
        await reader.close()


def test_stream_offsets_follow_the_store(redis_url):
    async def fill():
        import redis.asyncio as aioredis

        client = aioredis.from_url(redis_url)
        await client.flushall()
        engine = Engine(client, lambda: SNAP)
        await engine.append("t", "a", [Message(b"x")] * 3, partition=1)
        await engine.close()
        await client.aclose()

    asyncio.run(fill())
    reader = MqcloudStreamReader(
        {"redis_url": redis_url, "catalog": encode_catalog(SNAP), "topics": "t", "split_size": "2"}
    )
    assert reader.initialOffset() == {"t": {"0": 0, "1": 0}}
    end = reader.latestOffset({"t": {"0": 0, "1": 0}}, ReadAllAvailable())
    assert end == {"t": {"0": 0, "1": 3}}
    parts = reader.partitions({"t": {"0": 0, "1": 1}}, end)
    assert [p.split for p in parts] == [Split("t", 1, 1, 3)]
    # a topic new to a running query starts at its beginning
    assert [p.split for p in reader.partitions({}, end)] == [
        Split("t", 1, 0, 2),
        Split("t", 1, 2, 3),
    ]


async def test_compressed_batches_are_inflated(redis_client, redis_url):
    """A JMQ4 producer's zlib-compressed batch becomes one row per item, with its body."""
    from brokers.clients.jmq4 import OutgoingMessage, build_batch

    wire = build_batch(
        [OutgoingMessage(b"z" * 200, business_id=f"k{i}") for i in range(3)],
        app="a",
        partition=1,
        compress=True,
    )
    assert wire.sys_code & 0x1  # really compressed on the wire
    engine = Engine(redis_client, lambda: SNAP)
    await engine.append("t", "a", [wire.to_bytes()], partition=1)
    await engine.close()
    reader = StoreReader(redis_url, SNAP)
    try:
        rows = await collect(reader, Split("t", 1, 0, 3))
        assert [(r[2], r[4], r[6]) for r in rows] == [(i, f"k{i}", b"z" * 200) for i in range(3)]
    finally:
        await reader.close()


async def test_column_by_column_batches_equal_the_engine_decoders_rows(redis_client, redis_url):
    """The Arrow path (whole appends split and decoded by column) gives exactly the rows
    of the engine's decoder, for every way a split can start and end."""
    import pyarrow as pa

    from pipeline.columnar import rows_batch

    engine = Engine(redis_client, lambda: SNAP)
    attrs = {"k": "v", "a b": "ü", "vibemq.id": "m-1"}
    await engine.append("t", "a", [Message(b"m0", business_id="b0", attributes=attrs)],
                        partition=0, client_address="10.1.2.3:4567")  # fmt: skip
    items = [BatchItem(b"i0", "bi0"), BatchItem(b"i1", "bi1", {"x": "1"}, 3)]
    await engine.append("t", "a", [Message.batch(items), Message(b"", business_id="ü" * 9)],
                        partition=0, client_address="[::1]:80")  # fmt: skip
    await engine.append(
        "t", "a", [Message(b"p%d" % i, priority=i % 3 - 1) for i in range(7)], partition=0
    )
    await engine.close()
    reader = StoreReader(redis_url, SNAP)
    try:
        for start, end in ((0, 11), (1, 3), (2, 5), (3, 4), (5, 11), (4, 9)):
            split = Split("t", 0, start, end)
            got = pa.Table.from_batches([b async for b in reader.batches(split, chunk=3)])
            want = pa.Table.from_batches([rows_batch(await collect(reader, split))])
            assert got.sort_by("index").equals(want.sort_by("index")), (start, end)
            assert got.num_rows == end - start
    finally:
        await reader.close()
