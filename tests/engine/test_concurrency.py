"""Many consumers on one consumer group never hold the same partition at once."""

from __future__ import annotations

import asyncio

from brokers.engine import Message
from tests.engine.conftest import snapshot


async def test_consumers_never_share_a_partition(make_engine, store):
    partitions, consumers, messages = 4, 12, 400
    engine = make_engine(
        snapshot(topics={"t": {"partitions": partitions}}), clock=__import__("time").time
    )
    for p in range(partitions):
        await engine.append(
            "t",
            "a",
            [Message(b"%d-%d" % (p, i)) for i in range(messages // partitions)],
            partition=p,
        )
    holding: dict[int, str] = {}
    overlaps: list[tuple[int, str, str]] = []
    delivered: list[tuple[int, int]] = []

    async def consumer(name: str) -> None:
        idle = 0
        while idle < 3:
            r = await engine.fetch("t", "a", count=7, owner=name, ack_timeout_ms=30_000)
            if not r.found:
                idle += 1
                await asyncio.sleep(0.01)
                continue
            idle = 0
            if r.partition in holding:
                overlaps.append((r.partition, holding[r.partition], name))
            holding[r.partition] = name
            delivered.extend((r.partition, i) for d in r.messages for i in range(d.index, d.end))
            await asyncio.sleep(0.002)  # let others try to grab the partition meanwhile
            del holding[r.partition]
            await engine.ack("t", "a", r.partition, range(r.start, r.end), token=r.lock_token)

    await asyncio.gather(*(consumer(f"c{i}") for i in range(consumers)))
    assert overlaps == []
    # the locks also mean no message was delivered twice, and all were delivered
    assert sorted(delivered) == sorted(
        (p, i) for p in range(partitions) for i in range(messages // partitions)
    )
