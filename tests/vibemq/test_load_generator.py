"""The spec-written load generator of ``bench/vibemq_load.py`` against a real VibeMQ
server: what it counts as published must be stored, and what it counts as delivered must
be every one of those, acked (or the VibeMQ benchmark measures nothing)."""

from __future__ import annotations

import asyncio

from bench import vibemq_load


async def test_counts_what_was_stored_and_delivers_and_acks_all_of_it(broker, catalog, clients):
    published = await vibemq_load.publish(
        broker.port, catalog.token, "load", 0.3, conns=2, window=8
    )
    assert published.messages > 0
    assert (await broker.engine.queue_stats("load")).backlog == published.messages
    delivered = await vibemq_load.deliver(broker.port, catalog.token, "load", published.messages)
    assert delivered.messages == published.messages
    for _ in range(50):  # the acks of the last read are settled
        if (await broker.engine.queue_stats("load")).backlog == 0:
            break
        await asyncio.sleep(0.05)
    assert (await broker.engine.queue_stats("load")).backlog == 0
    late = await clients()
    await late.subscribe("load")
    assert late.deliveries.empty()
    await asyncio.sleep(0.3)
    assert late.deliveries.empty()
