"""Erasing a deleted topic: every key of every family goes, on single Redis and on a
cluster, and no key of a topic whose name merely starts or ends the same."""

from __future__ import annotations

from brokers.engine import Message, RetryType
from brokers.engine.erase import topic_key_pattern
from brokers.engine.keys import GroupKeys, PartitionKeys, RetryKeys, turn_key


async def all_keys(client) -> set[bytes]:
    return {k async for k in client.scan_iter(match="mq:*", count=1000)}


async def stored_and_retried(engine) -> None:
    """Three messages on partition 0 of ``t`` for app ``a``, the first failed (a retry)."""
    await engine.append("t", "a", [Message(b"m%d" % i) for i in range(3)], partition=0)
    got = await engine.fetch("t", "a", count=3, owner="c")
    await engine.ack(
        "t", "a", 0, [got.messages[0].index], retry_type=RetryType.EXCEPTION, owner="c",
        token=got.lock_token,
    )  # fmt: skip


async def test_erase_takes_every_key_of_the_topic_and_only_those(make_engine, store, clock):
    engine = make_engine()
    await stored_and_retried(engine)
    await engine.append_delayed("t", "a", Message(b"later"), deliver_at_ms=engine.now_ms() + 10)
    await engine.partition_in_turn("t")
    await engine.add_resend("t", "a", [(0, 1)])
    others = []
    for name in ("t2", "t.x", "x-t", "tt"):  # look alike, not the same
        for key in (
            PartitionKeys(name, 0).stream, RetryKeys(name, "a").due, GroupKeys(name, "a").clients,
            turn_key(name),
        ):  # fmt: skip
            await store.set(key, b"1")
            others.append(key.encode())
    before = await all_keys(store)
    mine = {k for k in before if b":t:" in k or b":t}" in k}
    assert len(mine) >= 8  # stream, meta, state, retry store, delays, turn, resend, …

    erased = await engine.erase_topic("t")

    after = await all_keys(store)
    assert not mine & after and erased == len(mine)
    assert set(others) <= after
    assert await store.smembers("mq:delayed-topics") == set()
    assert await engine.bounds("t", 0) == (0, 0)


def test_the_pattern_escapes_glob_characters():
    assert topic_key_pattern("orders") == "mq:{[trxgpoad]:orders[:}]*"
    assert topic_key_pattern("a*b?[c]") == r"mq:{[trxgpoad]:a\*b\?\[c\][:}]*"


async def test_erase_group_takes_one_consumer_groups_keys(make_engine, store, clock):
    """A deleted consumer group's progress (its broadcast clients' too), retries, dead
    letters and bookkeeping go; the messages and every other group's keys stay."""
    engine = make_engine()
    await stored_and_retried(engine)
    await engine.add_resend("t", "a", [(0, 1)])
    mine = [PartitionKeys("t", 1).state("a#client-7"), PartitionKeys("t", 2).ranges("a")]
    others = [
        PartitionKeys("t", 0).state("ab"),  # an app whose name starts the same
        PartitionKeys("t", 0).state("b#a"),
        RetryKeys("t", "ab").due,
        GroupKeys("t", "b").clients,
        RetryKeys("t2", "a").due,  # the same app on another topic
    ]
    for key in [*mine, *others]:
        await store.set(key, b"1")
    before = await all_keys(store)

    erased = await engine.erase_group("t", "a")

    after = await all_keys(store)
    gone = before - after
    assert erased == len(gone) and {k.encode() for k in mine} <= gone
    assert {k.encode() for k in others} <= after
    assert {PartitionKeys("t", 0).stream.encode(), PartitionKeys("t", 0).meta.encode()} <= after
    assert all(b":t:" in k or b":t}" in k for k in gone)
    assert RetryKeys("t", "a").due.encode() in gone
    assert GroupKeys("t", "a").resend(None).encode() in gone
    assert await engine.bounds("t", 0) == (0, 3)  # the messages stay
