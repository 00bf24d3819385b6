"""BrokerMessage helpers: sysCode, clientIp, in-place store rewrite, and §8.5 validation."""

from __future__ import annotations

from dataclasses import replace

import pytest

from brokers.protocols import jmq4
from tests.protocols.jmq4.test_vectors import by_title

STORED = by_title("BrokerMessage").data
MESSAGE = jmq4.BrokerMessage.from_bytes(STORED)


def built(**changes: object) -> jmq4.BrokerMessage:
    """A constructed (not decoded) message with a correct size."""
    fields: dict = {"body": b"hello", "app": "app1", **changes}
    message = jmq4.BrokerMessage(**fields)
    return replace(message, size=message.encoded_size)


# --- sysCode ------------------------------------------------------------------------------


def test_sys_code_typical_values() -> None:
    assert jmq4.SysCode().encode() == 0x018C
    zlib = jmq4.SysCode(compressed=True, compression=jmq4.CompressionType.ZLIB)
    assert zlib.encode() == 0x01AD
    assert jmq4.SysCode.decode(0x01AD) == zlib
    batch = jmq4.SysCode.decode(0x118C)
    assert batch.batch and batch.version == 1 and batch.short_address


def test_sys_code_compression_only_when_compressed() -> None:
    assert jmq4.SysCode(compression=jmq4.CompressionType.SNAPPY).encode() == 0x018C
    assert jmq4.SysCode.decode(0x01BC).compression == jmq4.CompressionType.NONE


def test_sys_code_version_0() -> None:
    decoded = jmq4.SysCode.decode(0x0071)  # compressed, 2-bit compression 3, bit6 ignored
    assert decoded.version == 0
    assert decoded.compression == jmq4.CompressionType.SNAPPY
    assert decoded.short_address


def test_sys_code_rejects_out_of_range_fields() -> None:
    with pytest.raises(jmq4.EncodeError):
        jmq4.SysCode(source=4).encode()


# --- clientIp -----------------------------------------------------------------------------


def test_client_address_ipv4() -> None:
    field, short = jmq4.encode_client_address("127.0.0.1", 8080)
    assert field.hex() == "901f7f000001" + "00" * 10
    assert short
    assert jmq4.decode_client_address(field, short) == ("127.0.0.1", 8080)


def test_client_address_ipv4_mapped_counts_as_ipv4() -> None:
    assert jmq4.encode_client_address("::ffff:10.1.2.3", 1) == (
        bytes.fromhex("01000a010203") + bytes(10),
        True,
    )


def test_client_address_ipv6_is_truncated() -> None:
    field, short = jmq4.encode_client_address("2001:db8::1:2", 65535)
    assert not short
    assert len(field) == 16
    assert field[:2] == b"\xff\xff"
    assert jmq4.decode_client_address(field, short) == ("2001:db8::1:0", 65535)


@pytest.mark.parametrize(("host", "port"), [("not-an-ip", 1), ("1.2.3.4", 70000), ("::1", -1)])
def test_client_address_rejects_bad_input(host: str, port: int) -> None:
    with pytest.raises(jmq4.EncodeError):
        jmq4.encode_client_address(host, port)


def test_decode_client_address_needs_16_bytes() -> None:
    with pytest.raises(jmq4.DecodeError):
        jmq4.decode_client_address(b"\x00" * 6, True)


# --- rewrite on store ---------------------------------------------------------------------------


def test_rewrite_message_changes_only_store_fields() -> None:
    buf = bytearray(STORED)
    jmq4.rewrite_message(
        buf,
        partition=3,
        index=2**40,
        term=7,
        store_time=15,
        client_address=("2001:db8::5", 9000),
    )
    stored = jmq4.BrokerMessage.from_bytes(bytes(buf))
    assert (stored.partition, stored.index, stored.term, stored.store_time) == (3, 2**40, 7, 15)
    assert stored.sys_code == 0x018C & ~0x80
    assert stored.client_address() == ("2001:db8::", 9000)
    assert (
        replace(
            stored,
            partition=-1,
            index=0,
            term=0,
            store_time=0,
            sys_code=0x018C,
            client_ip=MESSAGE.client_ip,
        )
        == MESSAGE
    )
    changed = {i for i, (a, b) in enumerate(zip(STORED, buf, strict=True)) if a != b}
    assert changed <= {*range(4, 18), 21, *range(23, 39), *range(47, 51)}

    jmq4.rewrite_message(buf, client_address=("10.0.0.1", 80))
    restored = jmq4.BrokerMessage.from_bytes(bytes(buf))
    assert restored.sys_code == 0x018C
    assert restored.client_address() == ("10.0.0.1", 80)


def test_rewrite_message_without_arguments_is_identity() -> None:
    buf = bytearray(STORED)
    jmq4.rewrite_message(buf)
    assert buf == STORED


@pytest.mark.parametrize(
    "changes",
    [{"partition": 40000}, {"index": 2**63}, {"term": -(2**31) - 1}, {"store_time": 2**31}],
)
def test_rewrite_message_rejects_out_of_range_values_atomically(changes: dict[str, int]) -> None:
    buf = bytearray(STORED)
    with pytest.raises(jmq4.EncodeError):
        jmq4.rewrite_message(buf, **{"index": 5, "partition": 5, **changes})
    assert buf == STORED


def test_rewrite_message_rejects_short_buffers() -> None:
    with pytest.raises(jmq4.EncodeError):
        jmq4.rewrite_message(bytearray(72), partition=0)


# --- encoding checks -----------------------------------------------------------------------------


def test_message_encoding_rejects_bad_fields() -> None:
    with pytest.raises(jmq4.EncodeError):
        jmq4.BrokerMessage(client_ip=b"\x00" * 15).to_bytes()
    with pytest.raises(jmq4.EncodeError, match="S1"):
        jmq4.BrokerMessage(business_id="x" * 128).to_bytes()
    with pytest.raises(jmq4.EncodeError):
        jmq4.BrokerMessage(partition=32768).to_bytes()


def test_from_bytes_requires_exact_span() -> None:
    with pytest.raises(jmq4.DecodeError):
        jmq4.BrokerMessage.from_bytes(STORED + b"\x00")
    with pytest.raises(jmq4.DecodeError):
        jmq4.BrokerMessage.from_bytes(STORED[:-1])


def test_replace_drops_raw_bytes() -> None:
    moved = replace(MESSAGE, partition=4)
    assert moved.raw == b""
    assert moved.to_bytes()[4:6] == b"\x00\x04"


# --- validation (§8.5) ---------------------------------------------------------------------------


def test_valid_messages_pass() -> None:
    assert jmq4.validate_message(MESSAGE) is None
    assert jmq4.validate_message(built()) is None
    assert jmq4.validate_message(built(body=bytes(3 * 1024 * 1024), business_id="b" * 100)) is None


@pytest.mark.parametrize(
    "message",
    [
        replace(MESSAGE, size=91),
        jmq4.BrokerMessage.from_bytes(b"\x00\x00\x00\x59" + STORED[4:]),
        built(sys_code=0x018C | 0x2000),
        built(sys_code=0x018C | 0x4000),
        built(sys_code=-0x8000 | 0x018C),
        built(body=bytes(3 * 1024 * 1024 + 1)),
        built(business_id="b" * 101),
    ],
    ids=["size-replaced", "size-decoded", "bit13", "bit14", "bit15", "body", "business-id"],
)
def test_invalid_messages_get_code_6(message: jmq4.BrokerMessage) -> None:
    assert jmq4.validate_message(message) == jmq4.Code.CN_PARAM_ERROR


BATCH_BODY = by_title("BatchMessageSerializer").data


@pytest.mark.parametrize(
    ("body", "flag", "sys_code", "expected"),
    [
        (BATCH_BODY, 2, 0x118C, None),
        (BATCH_BODY, 3, 0x118C, 6),
        (BATCH_BODY, 0, 0x118C, 6),
        (BATCH_BODY + b"\x00", 2, 0x118C, 6),
        (BATCH_BODY[:-1], 2, 0x118C, 6),
        (b"\x00\x00\x00\x11" + BATCH_BODY[4:], 2, 0x118C, 6),
        (b"", 0, 0x118C, 6),
        (b"compressed", 2, 0x11AD, None),
        (b"compressed", 0, 0x11AD, 6),
        (b"not a batch", 0, 0x018C, None),
    ],
)
def test_batch_validation(body: bytes, flag: int, sys_code: int, expected: int | None) -> None:
    assert jmq4.validate_message(built(body=body, flag=flag, sys_code=sys_code)) == expected


@pytest.mark.parametrize(
    ("name", "ok"),
    [
        ("t", True),
        ("t" * 255, True),
        ("主题.app-1_x", True),
        ("", False),
        ("t" * 256, False),
        ("a\nb", False),
        ("a\x00", False),
        ("a\x7f", False),
        ("a\x85", False),
    ],
)
def test_validate_name(name: str, ok: bool) -> None:
    assert jmq4.validate_name(name) == (None if ok else jmq4.Code.CN_PARAM_ERROR)


def test_decode_batch_rejects_item_size_mismatch() -> None:
    with pytest.raises(jmq4.DecodeError):
        jmq4.decode_batch(b"\x00\x00\x00\x0f" + BATCH_BODY[4:16])
