"""The spec-written load generator of ``bench/vibemq_load.py`` against a real VibeMQ
server: what it counts as published must be stored, and what it counts as delivered must
be every one of those, acked (or the VibeMQ benchmark measures nothing)."""

from __future__ import annotations

import asyncio

from bench import vibemq_load


async def test_counts_what_was_stored_and_delivers_and_acks_all_of_it(broker, catalog, clients):
    # room for all of it: an auto-created queue keeps 10,000 (DropOldest), which a fast
    # machine publishes in 0.3 s (CI: 10,496 published, 496 dropped)
    await (await clients()).create_queue("load", maxQueueSize="10000000")
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


async def test_latency_counts_every_message_sent_after_the_warm_up(broker, catalog):
    """The paced latency run publishes 10 per tick, times each delivery from the send time
    its id carries, and ends with every message delivered and acked."""
    result = await vibemq_load.latency(
        broker.port, catalog.token, "load", rate=1000, seconds=0.5, warmup=0.2
    )
    assert 300 <= result.samples <= 700  # of 700: about 500 are sent after the warm-up
    assert 0 < result.p50 <= result.p99 < 1000
    for _ in range(50):
        if (await broker.engine.queue_stats("load")).backlog == 0:
            break
        await asyncio.sleep(0.05)
    assert (await broker.engine.queue_stats("load")).backlog == 0
