"""Skipping a consumer's retries by age (console-features "skip retry messages older than
a time, optionally by key"): those that came into the store before the time go, as
consumed — with a key, only its messages'; newer ones and other keys stay; a broadcast
client's own store apart from the group's; any size of store, a chunk at a time."""

from __future__ import annotations

from brokers.engine import Message, RetryType
from tests.engine.conftest import snapshot


def _broadcast():
    return snapshot(
        topics={"t": {"partitions": 1}},
        consumers=[{"topic": "t", "app": "a", "broadcast": True}],
    )


async def test_retries_older_than_a_time_are_skipped(make_engine, clock):
    engine = make_engine(snapshot(topics={"t": {"partitions": 1}}))
    for key in ("k1", "k2", "k1"):
        await engine.append("t", "a", [Message(b"old", business_id=key)], partition=0)
    await engine.retry("t", "a", 0, [0, 1, 2])
    clock.advance(60)
    cut = engine.now_ms()
    await engine.append("t", "a", [Message(b"new", business_id="k1")], partition=0)
    await engine.retry("t", "a", 0, [3])
    assert (await engine.retry_counts("t", "a"))[0] == 4
    assert await engine.skip_retries_before("t", "a", cut, business_id="k1") == 2
    left = {(r.index, r.message.business_id) for r in await engine.retries("t", "a")}
    assert left == {(1, "k2"), (3, "k1")}
    assert await engine.skip_retries_before("t", "a", cut, business_id="nobody") == 0
    assert await engine.skip_retries_before("t", "a", cut) == 1  # k2's
    assert [r.index for r in await engine.retries("t", "a")] == [3]
    assert await engine.skip_retries_before("t", "a", cut) == 0


async def _fail_all(engine, client_id: str) -> None:
    """``client_id`` fetches every message and fails them: its own retries."""
    got = await engine.fetch("t", "a", count=3, client_id=client_id, start_position="earliest")
    await engine.ack(
        "t",
        "a",
        0,
        [d.index for d in got.messages],
        client_id=client_id,
        token=got.lock_token,
        retry_type=RetryType.EXCEPTION,
    )


async def test_a_broadcast_clients_own_retries_are_skipped_apart(make_engine, clock):
    engine = make_engine(_broadcast())
    await engine.append("t", "a", [Message(b"x")] * 3, partition=0)
    await engine.retry("t", "a", 0, [0, 1, 2])  # the group's
    for client_id in ("c1", "c2"):
        await _fail_all(engine, client_id)
    clock.advance(1)
    cut = engine.now_ms()
    own = {c: (await engine.retry_counts("t", "a", client_id=c))[0] for c in ("c1", "c2")}
    assert own["c1"] > 0 and own["c2"] > 0
    assert await engine.skip_retries_before("t", "a", cut, client_id="c1") == own["c1"]
    assert (await engine.retry_counts("t", "a"))[0] == 3  # the group's stay, and c2's
    assert (await engine.retry_counts("t", "a", client_id="c2"))[0] == own["c2"]
    # no client named: the group's and every client's
    assert await engine.skip_retries_before("t", "a", cut) == 3 + own["c2"]
    assert (await engine.retry_counts("t", "a", client_id="c2"))[0] == 0


async def test_a_large_store_is_skipped_a_chunk_at_a_time(make_engine, clock):
    engine = make_engine(snapshot(topics={"t": {"partitions": 1}}))
    await engine.append("t", "a", [Message(b"x") for _ in range(2_500)], partition=0)
    await engine.retry("t", "a", 0, list(range(2_500)))
    clock.advance(1)
    store = engine.retry_store("t", "a")
    assert await store.remove_created_before(engine.now_ms(), scan_count=100) == 2_500
    assert await engine.retry_counts("t", "a") == (0, 0)
