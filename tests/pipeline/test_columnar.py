"""The column-by-column decoder over whole stored appends, without Redis or Spark: records
it cannot vouch for go to the engine's decoder, which reports them; nothing else breaks."""

from __future__ import annotations

import pytest

from brokers.engine import BatchItem, InvalidMessage, Message, StoredEntry, encode_record
from pipeline.columnar import HEADER, entries_batch
from pipeline.reading import expand

NOW_MS = 1_700_000_000_000
MAGIC_AT = 4 + 2 + 8 + 4  # size, partition, index, term


def record(body: bytes, business_id: str = "k") -> bytes:
    return encode_record(Message(body, business_id=business_id), app="a", now_ms=NOW_MS)[0]


def reported(rest, start: int, end: int) -> list:
    """Rows of the records left to the engine's decoder (raises what it raises)."""
    return [row for d in rest for row in expand("t", d, start, end)]


def test_plain_records_of_several_appends_keep_their_indexes():
    entries = [
        StoredEntry(10, 2, record(b"a") + record(b"b", "kb")),
        StoredEntry(12, 1, record(b"c" * 300, "")),
    ]
    batch, rest = entries_batch("t", 3, entries, 11, 13)
    assert rest == []
    assert batch.column("index").to_pylist() == [11, 12]
    assert batch.column("body").to_pylist() == [b"b", b"c" * 300]
    assert batch.column("business_id").to_pylist() == ["kb", ""]
    assert batch.column("partition").to_pylist() == [3, 3]
    assert batch.column("app").to_pylist() == ["a", "a"]


def test_a_batch_record_reaching_into_the_range_goes_to_the_engine_decoder():
    items = [BatchItem(b"i0", "b0"), BatchItem(b"i1", "b1"), BatchItem(b"i2", "b2")]
    whole = encode_record(Message.batch(items), app="a", now_ms=NOW_MS)[0]
    entries = [StoredEntry(0, 4, whole + record(b"after"))]
    batch, rest = entries_batch("t", 0, entries, 2, 4)
    assert batch.column("index").to_pylist() == [3]
    assert [(d.index, d.count) for d in rest] == [(0, 3)]
    assert [(r[2], r[6]) for r in reported(rest, 2, 4)] == [(2, b"i2")]


def test_a_corrupt_record_is_reported_by_the_engine_decoder():
    bad = bytearray(record(b"two"))
    bad[MAGIC_AT] ^= 0xFF
    entries = [StoredEntry(0, 1, record(b"one")), StoredEntry(1, 1, bytes(bad))]
    batch, rest = entries_batch("t", 0, entries, 0, 2)
    assert batch.column("index").to_pylist() == [0]
    assert [d.index for d in rest] == [1]
    with pytest.raises(InvalidMessage):
        reported(rest, 0, 2)


@pytest.mark.parametrize("cut", [3, 30, HEADER.itemsize + 2])
def test_a_truncated_record_beside_whole_ones_is_reported_not_a_crash(cut):
    """A record cut short (shorter than the fixed header, or with its tail missing) next to
    whole ones: the whole ones decode, the short one reaches the engine's decoder."""
    whole = record(b"x" * 100)
    entries = [StoredEntry(0, 2, whole + record(b"y")[:cut])]
    batch, rest = entries_batch("t", 0, entries, 0, 2)
    assert batch.column("index").to_pylist() == [0]
    assert [d.index for d in rest] == [1]
    with pytest.raises(InvalidMessage):
        reported(rest, 0, 2)


def test_empty_appends_take_no_index():
    one, two = record(b"one"), record(b"two")
    for entries in (
        [StoredEntry(0, 1, one), StoredEntry(1, 0, b""), StoredEntry(1, 1, two)],
        [StoredEntry(0, 1, one), StoredEntry(1, 1, two), StoredEntry(2, 0, b"")],
        [StoredEntry(0, 0, b""), StoredEntry(0, 1, one), StoredEntry(1, 1, two)],
    ):
        batch, rest = entries_batch("t", 0, entries, 0, 2)
        assert rest == [] and batch.column("index").to_pylist() == [0, 1]
    assert entries_batch("t", 0, [StoredEntry(0, 0, b"")], 0, 1) == (None, [])


def test_properties_past_the_attributes_field_reach_the_archive_whole():
    """A record whose properties go on in its extension (over 32,767 bytes) is left to the
    engine's decoder, which joins them; a plain record with a front-end's mark is not."""
    props = {"messageId": "m1", "pad": "p" * 40_000, "after": "yes"}
    large = encode_record(
        Message(b"big", attributes=props, extension=b"zb1\0"), app="a", now_ms=NOW_MS
    )[0]
    marked = encode_record(
        Message(b"small", attributes={"x": "1"}, extension=b"vm1\0"), app="a", now_ms=NOW_MS
    )[0]
    batch, rest = entries_batch("t", 0, [StoredEntry(0, 2, marked + large)], 0, 2)
    assert batch.column("index").to_pylist() == [0]
    assert batch.column("attributes").to_pylist() == [[("x", "1")]]
    assert [d.index for d in rest] == [1]
    (row,) = reported(rest, 0, 2)
    assert dict(row[5]) == props
