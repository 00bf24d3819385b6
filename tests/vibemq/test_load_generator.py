"""The spec-written load generator of ``bench/vibemq_load.py`` against a real VibeMQ
server: what it counts as published must be stored, and what it counts as delivered must
be every one of those, acked (or the VibeMQ benchmark measures nothing)."""

from __future__ import annotations

import asyncio

from bench import vibemq_load
from tests.cycles import project_cycles


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


async def test_publishing_and_delivering_leave_no_cyclic_garbage(broker, catalog, clients):
    """Every publish, delivery and ack is freed by reference counting: garbage only a
    collection frees waits for one, and a broker's collection of tens of thousands of
    objects stalled every connection for 20-30 ms — publish→deliver p99 25 ms at 5,000/s
    (compiled, a closure defined in a coroutine made a cycle at every publish run and
    every append; see brokers/compiled.py)."""
    await (await clients()).create_queue("tidy", maxQueueSize="10000000")
    warm = await vibemq_load.publish(broker.port, catalog.token, "tidy", 0.1, conns=1, window=4)
    await vibemq_load.deliver(broker.port, catalog.token, "tidy", warm.messages)
    with project_cycles() as cycles:
        published = await vibemq_load.publish(
            broker.port, catalog.token, "tidy", 0.3, conns=2, window=4
        )
        delivered = await vibemq_load.deliver(
            broker.port, catalog.token, "tidy", published.messages
        )
    assert delivered.messages == published.messages > 100
    assert cycles == {}
