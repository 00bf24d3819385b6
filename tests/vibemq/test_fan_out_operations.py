"""An operator's reset and re-consume reach every subscriber of a VibeMQ fan-out queue.

Each member of a FanOutWithAck queue has progress of its own (vibemq.md §9.1). The
operations the console's applications run on a worker — an offset reset, a re-consume of
a time span — used to move only the consumer group's own progress and retries, which no
fan-out subscriber reads: a replay reached none of them, or (a re-consume) whichever
leased the group's copy first.
"""

from __future__ import annotations

import asyncio
import json

from brokers.clients.vibemq import VibeMQClient
from tests.vibemq.conftest import Broker


async def _replayed(subs: list[VibeMQClient], n: int) -> list[list[object]]:
    out = []
    for sub in subs:
        got = [await sub.receive(5) for _ in range(n)]
        for m in got:
            sub.ack(m.id)
        await sub.ping()
        out.append([m.payload for m in got])
    return out


async def test_a_reset_and_a_reconsume_reach_each_subscriber(broker: Broker, catalog) -> None:
    pub = await VibeMQClient.open("127.0.0.1", broker.port, catalog.token)
    subs = [
        await VibeMQClient.open("127.0.0.1", broker.port, catalog.token, client_id=f"m{i}")
        for i in range(2)
    ]
    try:
        await pub.create_queue("wide-ops", deliveryMode="FanOutWithAck")
        for sub in subs:
            await sub.subscribe("wide-ops")
            await sub.ping()
        started = broker.engine.now_ms() - 1
        for i in range(3):
            await pub.publish("wide-ops", i, message_id=f"w{i}")
        assert await _replayed(subs, 3) == [[0, 1, 2], [0, 1, 2]]
        engine, app = broker.engine, "app1"

        # a re-consume without a client: a copy for each member, none for the group
        members = await engine.reconsumers("wide-ops", app)
        assert sorted(members) == ["m0", "m1"]
        spans = await engine.reconsume_spans(
            "wide-ops", app, from_ms=started, to_ms=engine.now_ms() + 1, clients=len(members)
        )
        for member in members:
            for p, (first, end) in spans.items():
                await engine.reconsume("wide-ops", app, p, first, end, client_id=member)
        assert await _replayed(subs, 3) == [[0, 1, 2], [0, 1, 2]]

        # an offset reset to the earliest: every subscriber gets the queue again
        await engine.reset_offsets("wide-ops", app, position="earliest")
        assert await _replayed(subs, 3) == [[0, 1, 2], [0, 1, 2]]
        await asyncio.sleep(0.3)
        for sub in subs:
            assert sub.deliveries.empty()  # and nothing twice
    finally:
        for c in (pub, *subs):
            await c.close()


async def test_a_subscribers_membership_is_held_by_its_broker(broker: Broker, catalog) -> None:
    """A fan-out subscriber's membership is recorded under its broker's lease holder —
    should the broker die, another's sweep makes it leave — and the record goes when the
    subscriber does."""
    from brokers.engine.keys import holder_members_key

    key = holder_members_key(broker.engine.holders.id)
    pub = await VibeMQClient.open("127.0.0.1", broker.port, catalog.token)
    durable = await VibeMQClient.open("127.0.0.1", broker.port, catalog.token, client_id="d1")
    own = await VibeMQClient.open("127.0.0.1", broker.port, catalog.token)
    try:
        await pub.create_queue("held-ops", deliveryMode="FanOutWithAck")
        for sub in (durable, own):
            await sub.subscribe("held-ops")
            await sub.ping()
        held = {k.decode(): v.decode() for k, v in (await broker.redis.hgetall(key)).items()}
        assert len(held) == 2
        kept = {json.loads(k)[2]: v for k, v in held.items()}
        assert kept["d1"] == str(broker.server.ctx.config.fanout_retention_ms)
        assert [v for m, v in kept.items() if m.startswith("~")] == ["-"]
        await own.close()
        for _ in range(50):
            if await broker.redis.hlen(key) == 1:
                break
            await asyncio.sleep(0.02)
        assert await broker.redis.hlen(key) == 1
    finally:
        for c in (pub, durable, own):
            await c.close()
