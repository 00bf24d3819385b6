"""Reader and Writer bounds and limits (spec §1)."""

from __future__ import annotations

import pytest

from brokers.protocols import jmq4


def write(method: str, value: object) -> bytes:
    w = jmq4.Writer()
    getattr(w, method)(value)
    return w.getvalue()


def test_integers_are_big_endian_signed() -> None:
    assert write("write_byte", -10) == b"\xf6"
    assert write("write_short", -2) == b"\xff\xfe"
    assert write("write_int", 0x01020304) == b"\x01\x02\x03\x04"
    assert write("write_long", -1) == b"\xff" * 8
    assert write("write_double", 0.0) == b"\x00" * 8
    r = jmq4.Reader(b"\xf6\xff\xfe\x80\x05\x00")
    assert (r.read_byte(), r.read_short(), r.read_ubyte(), r.read_bool(), r.read_bool()) == (
        -10,
        -2,
        128,
        True,
        False,
    )
    assert r.remaining == 0


@pytest.mark.parametrize(
    ("method", "value"),
    [
        ("write_byte", 128),
        ("write_byte", -129),
        ("write_ubyte", 256),
        ("write_short", 32768),
        ("write_int", 2**31),
        ("write_long", 2**63),
        ("write_int", None),
        ("write_count", -1),
        ("write_count", 32768),
        ("write_s1", "x" * 128),
        ("write_s1", "é" * 64),
        ("write_s2", "x" * 32768),
        ("write_s1", "\ud800"),
        ("write_s2", 5),
    ],
)
def test_writer_rejects_unencodable_values(method: str, value: object) -> None:
    with pytest.raises(jmq4.EncodeError):
        write(method, value)


def test_string_limits_are_inclusive() -> None:
    assert write("write_s1", "x" * 127)[0] == 127
    assert write("write_s2", "x" * 32767)[:2] == b"\x7f\xff"
    assert write("write_s1", None) == b"\x00"
    assert write("write_s2", "") == b"\x00\x00"
    assert write("write_bytes4", None) == b"\x00\x00\x00\x00"


def test_zero_length_strings_decode_as_empty() -> None:
    r = jmq4.Reader(b"\x00\x00\x00\x00\x00\x00\x00")
    assert (r.read_s1(), r.read_s2(), r.read_bytes4()) == ("", "", b"")


@pytest.mark.parametrize(
    ("method", "data"),
    [
        ("read_int", b"\x00\x00\x00"),
        ("read_s1", b"\x80"),
        ("read_s1", b"\x02a"),
        ("read_s2", b"\xff\xff"),
        ("read_s2", b"\x00\x01\xff"),
        ("read_bytes4", b"\xff\xff\xff\xff"),
        ("read_bytes4", b"\x00\x00\x00\x02\x00"),
        ("read_count", b"\x80\x00"),
    ],
)
def test_reader_rejects_malformed_input(method: str, data: bytes) -> None:
    with pytest.raises(jmq4.DecodeError):
        getattr(jmq4.Reader(data), method)()


def test_reader_respects_its_bounds() -> None:
    r = jmq4.Reader(b"\x00\x01\x02\x03\x04\x05", 1, 3)
    assert r.read_short() == 0x0102
    with pytest.raises(jmq4.DecodeError):
        r.read_byte()
    with pytest.raises(jmq4.DecodeError):
        r.read_raw(-1)


def test_arrays() -> None:
    w = jmq4.Writer()
    w.write_array(["a", "bc"], lambda w_, s: w_.write_s2(s))
    assert w.getvalue() == b"\x00\x02\x00\x01a\x00\x02bc"
    assert len(w) == 9
    assert jmq4.Reader(w.getvalue()).read_array(lambda r: r.read_s2()) == ("a", "bc")
