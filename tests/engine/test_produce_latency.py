"""Producer statistics: every append through the facade is counted per producer and
client host — its messages in the latency bucket of the call, those it could not store
as failed — per hour, and read back over a window of whole hours."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from brokers.engine import AccessDenied, Message, MessageTooLarge
from brokers.engine.latency import BOUNDS_MS
from brokers.engine.produce_latency import (
    BUCKETS,
    DAY_DIMENSION,
    DAY_RETENTION_S,
    DIMENSION,
    HOUR_RETENTION_S,
    MAX_HOURS,
    UNKNOWN_CLIENT,
    ClientLatency,
    client_host,
)
from tests.engine.conftest import snapshot


@pytest.mark.parametrize(
    ("address", "host"),
    [
        ("10.1.2.3:5000", "10.1.2.3"),
        ("[::1]:7", "::1"),
        ("fe80::1%eth0", "fe80::1%eth0"),
        ("broker-host", "broker-host"),
        ("", UNKNOWN_CLIENT),
        (None, UNKNOWN_CLIENT),
        ("a|b c\r\n", "abc"),  # a client-named address (HTTP-MQ clientIp) made safe
        ("|||", UNKNOWN_CLIENT),
        ("x" * 100, "x" * 64),
    ],
)
def test_a_client_host_is_the_address_without_its_port_and_safe_as_a_field(address, host):
    assert client_host(address) == host


@given(st.text(max_size=80))
def test_any_address_makes_a_field_name_a_read_splits_back(address):
    host = client_host(address)
    assert host and "|" not in host and len(host) <= 64
    assert f"{host}|3".rpartition("|") == (host, "|", "3")


def test_a_percentile_is_the_bound_of_its_bucket():
    counts = [0] * BUCKETS
    counts[0], counts[3], counts[-1] = 90, 9, 1  # ≤1 ms, ≤10 ms, slower than them all
    latency = ClientLatency(tuple(counts), failed=2)
    assert latency.messages == 100
    assert latency.percentile(0.5) == BOUNDS_MS[0] == 1
    assert latency.percentile(0.99) == BOUNDS_MS[3] == 10
    assert latency.percentile(1.0) is None  # slower than the largest bound
    assert ClientLatency((0,) * BUCKETS, failed=3).percentile(0.5) is None


async def test_appends_are_counted_per_producer_and_client_host(make_engine):
    engine = make_engine(
        snapshot(topics={"t": {"partitions": 1}, "u": {"partitions": 1}}), max_body=64
    )
    await engine.append("t", "a", [Message(b"1"), Message(b"2")], client_address="10.0.0.1:5000")
    await engine.append("t", "a", [Message(b"3")], client_address="10.0.0.1:5001")  # same host
    await engine.append("t", "a", [Message(b"4")], client_address="[::1]:9")
    got = await engine.append_many(
        "u",
        "a",
        [Message(b"ok"), Message(b"x" * 100), Message(b"ok")],
        client_address="10.0.0.2:1",
    )
    assert isinstance(got[1], MessageTooLarge)
    with pytest.raises(AccessDenied):  # no producer policy: every message failed
        await engine.append("t", "nobody", [Message(b"5")] * 3, client_address="10.0.0.9:1")
    stats = await engine.produce_latency([("t", "a"), ("u", "a"), ("t", "nobody")], hours=1)
    counts = {k: (v.messages, v.failed) for k, v in stats.items()}
    assert counts == {
        ("t", "a", "10.0.0.1"): (3, 0),
        ("t", "a", "::1"): (1, 0),
        ("u", "a", "10.0.0.2"): (2, 1),
        ("t", "nobody", "10.0.0.9"): (0, 3),
    }
    fast = stats[("t", "a", "10.0.0.1")]
    assert fast.percentile(0.99) is not None  # a local append is well under 5 s


async def test_a_window_covers_whole_hours_then_whole_days(make_engine, clock):
    """Up to a day, a window is the whole hours asked for and the current one; longer,
    the UTC days it touches — from the hashes kept by the hour (two days) and by the day
    (eleven)."""
    engine = make_engine(snapshot(topics={"t": {"partitions": 1}}))
    await engine.append("t", "a", [Message(b"old")], client_address="10.0.0.1:1")
    await engine.produce_latency([], 0)  # flushed
    for dimension, kept in ((DIMENSION, HOUR_RETENTION_S), (DAY_DIMENSION, DAY_RETENTION_S)):
        keys = [k async for k in engine.redis.scan_iter(match=f"*:{dimension}:*")]
        assert len(keys) == 1 and kept - 5 < await engine.redis.ttl(keys[0]) <= kept
    clock.advance(3 * 3600)
    await engine.append("t", "a", [Message(b"new")] * 2, client_address="10.0.0.1:1")

    async def messages(hours: int) -> int:
        found = await engine.produce_latency([("t", "a")], hours)
        return sum(v.messages for v in found.values())

    assert await messages(0) == 2  # the current hour
    assert await messages(2) == 2
    assert await messages(3) == 3
    clock.advance(3 * 86400)  # three days on: nothing in the last day
    await engine.append("t", "a", [Message(b"now")], client_address="10.0.0.1:1")
    assert await messages(24) == 1
    assert await messages(25) == 1  # days: today, yesterday
    assert await messages(4 * 24) == 4
    assert await messages(10_000) == await messages(MAX_HOURS) == 4  # the 10 days kept


async def test_a_failed_flush_keeps_the_counts_for_the_next(make_engine, monkeypatch):
    engine = make_engine(snapshot(topics={"t": {"partitions": 1}}))
    await engine.append("t", "a", [Message(b"1")], client_address="10.0.0.1:1")
    latencies = engine.produce_latencies
    real = latencies._client

    class Broken:
        def pipeline(self, transaction: bool = False):
            pipe = real.pipeline(transaction=transaction)

            async def execute():
                raise ConnectionError("store away")

            pipe.execute = execute
            return pipe

    monkeypatch.setattr(latencies, "_client", Broken())
    await latencies.flush()
    monkeypatch.setattr(latencies, "_client", real)
    await engine.append("t", "a", [Message(b"2")], client_address="10.0.0.1:1")
    found = await engine.produce_latency([("t", "a")], 1)
    assert found[("t", "a", "10.0.0.1")].messages == 2
