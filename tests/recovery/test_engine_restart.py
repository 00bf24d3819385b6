"""The engine across a Redis restart (issue 20 items 1 and 2), on a Redis the test owns.

A long-poll consumer that keeps fetching through the outage (as clients do) is delivered
to again within 2 s of Redis being back, whatever the outage; the first append after the
restart succeeds; and an append whose connection died after Redis ran it is repeated
without being stored twice.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from brokers.engine import Delivery, Engine, Message, QoS, StoreUnavailable, decode_record
from brokers.engine.append import APPEND, REMEMBERED
from brokers.engine.keys import PartitionKeys, notify_channel
from brokers.engine.redisio import broker_client
from tests.engine.conftest import listening_inbox, snapshot
from tests.recovery.cutter import Cutter
from tests.recovery.redis_server import OwnRedis

SNAP = snapshot(topics={"t": {"partitions": 2}})


class Consumer:
    """Long-polls ``t`` in a loop, retrying after errors, and records what arrives when."""

    def __init__(self, engine: Engine, long_poll_ms: int) -> None:
        self.engine, self.long_poll_ms = engine, long_poll_ms
        self.arrived: dict[bytes, float] = {}
        self.errors = 0
        self._task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        while True:
            try:
                result = await self.engine.fetch(
                    "t", "a", count=10, long_poll_ms=self.long_poll_ms, owner="c1"
                )
            except StoreUnavailable:
                self.errors += 1
                await asyncio.sleep(0.05)
                continue
            for m in result.messages:
                self.arrived[self.engine_body(m)] = time.monotonic()
            if result.messages:
                await self.engine.ack(
                    "t",
                    "a",
                    result.partition,
                    [m.index for m in result.messages],
                    owner="c1",
                    token=result.lock_token,
                )

    @staticmethod
    def engine_body(delivery: Delivery) -> bytes:
        return decode_record(delivery.record).body

    async def wait_for(self, body: bytes, within: float) -> float:
        """When ``body`` arrived (time.monotonic()); fails after ``within`` seconds."""
        deadline = time.monotonic() + within
        while body not in self.arrived:
            assert time.monotonic() < deadline, f"{body!r} not delivered in {within}s"
            await asyncio.sleep(0.01)
        return self.arrived[body]

    async def stop(self) -> None:
        self._task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await self._task


async def _parked(engine: Engine, topic: str = "t") -> None:
    deadline = time.monotonic() + 5
    while not (engine.notifier.connected and engine.notifier.parked(topic)):
        assert time.monotonic() < deadline, "the consumer never parked on a live link"
        await asyncio.sleep(0.01)


@pytest.mark.parametrize("outage", [0.3, 0.5, 2.0])
async def test_long_polls_and_the_first_append_recover_after_a_redis_outage(own_redis, outage):
    client = broker_client(own_redis.url, max_connections=8)
    engine = Engine(client, lambda: SNAP)
    consumer = Consumer(engine, long_poll_ms=1000)
    try:
        await engine.append("t", "a", [Message(b"before")])
        await consumer.wait_for(b"before", 2)
        await _parked(engine)
        own_redis.kill()
        await asyncio.sleep(outage)
        await asyncio.to_thread(own_redis.start)
        # the first append after the restart succeeds (item 2): stale connections are
        # replaced before use, or the append is repeated on a fresh one
        stored = await engine.append("t", "a", [Message(b"after")], qos=QoS.RECEIVED)
        assert stored.first_index >= 0
        arrived = await consumer.wait_for(b"after", 2.5)
        assert arrived - own_redis.back_at < 2.0
        # and the consumer is parked on notifications again, not on its deadline
        await _parked(engine)
        sent = time.monotonic()
        await engine.append("t", "a", [Message(b"woken")])
        assert await consumer.wait_for(b"woken", 1) - sent < 0.5
        assert engine.notifier.reconnects >= 1
    finally:
        await consumer.stop()
        await engine.close()
        await client.aclose()


async def test_every_qos_appends_first_time_after_a_restart(tmp_path):
    """Idle pooled connections of every path (multiplexed, pipelined with a durability
    wait, EVAL fallback) are stale after the restart; none of them fails an append.

    Its own Redis fsyncs every write (``appendfsync always``): under load an ``everysec``
    Redis may postpone its AOF write, and the kill -9 of the outage then loses the warm-up
    appends — a durability trade-off this test is not about (CI saw (0, 4))."""
    own_redis = OwnRedis(tmp_path / "redis", appendfsync="always")
    own_redis.start()
    client = broker_client(own_redis.url, max_connections=8)
    engine = Engine(client, lambda: SNAP)
    try:
        for qos in QoS:
            await engine.append("t", "a", [Message(b"warm")], partition=0, qos=qos)
        await asyncio.to_thread(own_redis.outage, 0.2)
        for qos in (QoS.PERSISTED, QoS.RECEIVED, QoS.REPLICATED):
            await engine.append("t", "a", [Message(b"after")], partition=0, qos=qos)
        assert await engine.bounds("t", 0) == (0, 7)
    finally:
        await engine.close()
        await client.aclose()
        own_redis.stop()


async def test_an_append_whose_reply_was_lost_is_repeated_and_stored_once(own_redis):
    """The connection dies after Redis ran the append and before its reply came back:
    the engine repeats it on a fresh connection and the repeat stores nothing."""
    async with Cutter(own_redis.server.port, marker=APPEND.sha.encode()) as cutter:
        client = broker_client(cutter.url, max_connections=4)
        engine = Engine(client, lambda: SNAP)
        try:
            await engine.append("t", "a", [Message(b"m0")], partition=1)  # scripts loaded
            cutter.arm()
            stored = await engine.append("t", "a", [Message(b"m1"), Message(b"m2")], partition=1)
            assert cutter.cuts == 1
            assert stored.indexes == (1, 2)
            assert await engine.bounds("t", 1) == (0, 3)
            bodies = [Consumer.engine_body(d) for d in await engine.read("t", 1, 0, count=10)]
            assert bodies == [b"m0", b"m1", b"m2"]
            assert (await engine.append("t", "a", [Message(b"m3")], partition=1)).indexes == (3,)
        finally:
            await engine.close()
            await client.aclose()


async def test_a_repeat_refuses_when_the_ids_no_longer_reach_back(own_redis):
    client = broker_client(own_redis.url, max_connections=4)
    keys = PartitionKeys("t", 0)
    call_keys = (keys.stream, keys.meta, keys.requests)

    async def call(rid: str, floor: str) -> int:
        blob = _record_blob()
        args = (notify_channel("t"), 0, -1, 1, blob, rid, floor, REMEMBERED)
        return int(await APPEND(client, call_keys, args))

    try:
        assert await call("first", "") == 0
        assert await call("first", "") == 0  # the same request again: not stored twice
        assert await call("first", "0") == 0
        for i in range(2 * REMEMBERED + 5):
            await call(f"r{i}", "")
        assert REMEMBERED <= await client.zcard(keys.requests) <= 2 * REMEMBERED
        assert await client.zscore(keys.requests, "first") is None
        # "first" rolled out: a repeat that could have landed at 0 cannot tell any more
        assert await call("first", "0") == -1
        assert await call("unknown-floor", "-1") == -1
        # a repeat whose first attempt could only have landed inside the window can
        nxt = int(await client.hget(keys.meta, "next"))
        assert await call("new", str(nxt - 3)) == nxt
        assert int(await client.hget(keys.meta, "next")) == nxt + 1
    finally:
        await client.aclose()


def _record_blob() -> bytes:
    from brokers.engine.record import RecordEncoder

    record, _count = RecordEncoder(app="a", partition=0, now_ms=1, client_address=None).encode(
        Message(b"x")
    )
    return record


async def test_an_inbox_hears_again_after_a_redis_restart(own_redis):
    """A process's inbox (Temp MQ replies from other processes) blocks on its read with no
    timer; when Redis restarts under it, the read fails, it subscribes again, and what is
    sent once Redis is back arrives."""
    client = broker_client(own_redis.url, max_connections=8)
    engine = Engine(client, lambda: SNAP)
    try:
        async with listening_inbox(engine) as (owner, sender, heard):
            assert await sender.send(owner.owner, b"before")
            assert await asyncio.wait_for(heard.get(), 2) == b"before"
            own_redis.kill()
            await asyncio.sleep(0.3)
            await asyncio.to_thread(own_redis.start)
            deadline = time.monotonic() + 5
            while not await _sent(sender, owner.owner, b"after"):
                assert time.monotonic() < deadline, "the inbox never subscribed again"
                await asyncio.sleep(0.05)
            assert await asyncio.wait_for(heard.get(), 2) == b"after"
    finally:
        await engine.close()
        await client.aclose()


async def _sent(sender, owner: str, data: bytes) -> bool:
    """Whether a process listened to ``owner``'s inbox when ``data`` was sent."""
    try:
        return await sender.send(owner, data)
    except Exception:  # Redis still coming back: the client's connection is being replaced
        return False
