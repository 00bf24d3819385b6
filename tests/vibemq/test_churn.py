"""Connection and queue churn leaves nothing behind in a VibeMQ server: clients that
connect, subscribe, consume and leave (cleanly, or by a reset) are forgotten by the hub,
its dispatchers and their sessions, and a queue nobody subscribes any more has no
dispatcher — while the subscribers that stay are served as before."""

from __future__ import annotations

import asyncio
import gc
import time
import weakref

import redis.asyncio as aioredis

from tests.access.conftest import until
from tests.vibemq.conftest import Raw

CHURN = 20


async def _connect(port: int, token: str) -> tuple[Raw, str]:
    """A raw connection after ``connect``; its connection id (the session's key)."""
    r = await Raw.open(port)
    r.send({"id": "c", "type": "connect", "headers": {"authToken": token}})
    reply = await r.recv()
    assert reply["type"] == "connectAck"
    return r, reply["headers"]["connectionId"]


async def _subscribe(r: Raw, queue: str) -> None:
    r.send({"id": f"s-{queue}", "type": "subscribe", "queue": queue})
    assert (await r.recv())["type"] == "subscribeAck"


async def _leave(r: Raw, i: int) -> None:
    """Half of the fleet says ``disconnect`` and closes, half drops by a reset."""
    if i % 2:
        r.writer.transport.abort()
    else:
        r.send({"id": "bye", "type": "disconnect"})
        await r.close()


async def _member_keys_left(redis_url: str, key: str, within: float = 3.0) -> list[bytes]:
    """The Redis keys of connection ``key``'s fan-out members (``~<connection id>``) once
    none is left or ``within`` seconds passed (its close is handled as the broker reads
    it)."""
    store = aioredis.from_url(redis_url)
    try:
        deadline = time.monotonic() + within
        while True:
            left = [k async for k in store.scan_iter(match=f"*~{key}*")]
            if not left or time.monotonic() > deadline:
                return left
            await asyncio.sleep(0.05)
    finally:
        await store.aclose()


async def test_subscribers_that_left_leave_nothing_in_the_hub(broker, catalog, clients):
    keeper = await clients()
    await keeper.create_queue("rr")
    await keeper.create_queue("fo", deliveryMode="FanOutWithAck")
    await keeper.create_queue("fx", deliveryMode="FanOutWithoutAck")
    for queue in ("rr", "fo", "fx"):
        await keeper.subscribe(queue)
    hub = broker.server.hub
    gone: list[str] = []
    for i in range(CHURN):
        r, key = await _connect(broker.port, catalog.token)
        gone.append(key)
        for queue in ("rr", "fo", "fx", f"tmp{i}"):
            await _subscribe(r, queue)
        await _leave(r, i)

    def forgotten() -> bool:
        return len(hub.sessions) == 1 and broker.server.ctx.gate.active == 1

    await until(forgotten, what=lambda: f"{len(hub.sessions)} sessions")
    # a queue nobody subscribes any more has no dispatcher
    await until(
        lambda: sorted(hub.dispatchers) == ["fo", "fx", "rr"],
        what=lambda: {q: (len(d.subscribers), d.task) for q, d in hub.dispatchers.items()},
    )
    for queue, disp in hub.dispatchers.items():
        assert len(disp.subscribers) == 1, queue
        marks = [k for k in disp._caught_up._until if any(f"~{key}" in k for key in gone)]
        assert marks == [], f"{queue}: caught-up marks of members that left: {len(marks)}"

    # those that stayed are served as before, and so is a newcomer to a dropped queue
    await keeper.publish("rr", "r1", message_id="r1")
    await keeper.publish("fo", "f1", message_id="f1")
    await keeper.publish("fx", "x1", message_id="x1")
    got = {(await keeper.receive()).id for _ in range(3)}
    assert got == {"r1", "f1", "x1"}
    late = await clients()
    await late.subscribe("tmp3")
    await keeper.publish("tmp3", "t", message_id="t3")
    assert (await late.receive()).id == "t3"


async def test_a_consumer_held_back_then_gone_does_not_keep_its_dispatcher_busy(broker, clients):
    """A consumer over its rate limit (or refused) is held back for a while; when it leaves
    meanwhile nobody asks for it again, and its lapsed entry made the dispatcher of a
    queue others still consume wake every 10 ms for good."""
    keeper = await clients()
    await keeper.create_queue("busy")
    await keeper.subscribe("busy")
    disp = broker.server.hub.dispatchers["busy"]
    rounds = 0
    real = disp._round

    async def counted() -> bool:
        nonlocal rounds
        rounds += 1
        return await real()

    disp._round = counted  # type: ignore[method-assign]
    for i in range(CHURN):  # what their rate limits left behind
        disp._block(("app1", f"10.0.0.{i}"), 50)
    disp.kick()
    await asyncio.sleep(0.3)
    rounds = 0
    await asyncio.sleep(0.5)
    assert rounds <= 3, f"{rounds} rounds in 0.5 s on an idle queue"
    assert disp._blocked == {}
    await keeper.publish("busy", "b", message_id="b1")
    assert (await keeper.receive()).id == "b1"


async def test_unsubscribed_queues_leave_no_buffer_in_the_session(broker, catalog, clients):
    keeper = await clients()
    r, key = await _connect(broker.port, catalog.token)
    for i in range(CHURN):
        queue = f"copies{i}"
        await keeper.create_queue(queue, deliveryMode="FanOutWithoutAck")
        await _subscribe(r, queue)
        await keeper.publish(queue, i, message_id=f"m{i}")
        assert (await r.recv())["type"] == "deliver"
        r.send({"id": "u", "type": "unsubscribe", "queue": queue})
        assert (await r.recv())["type"] == "unsubscribeAck"
    (session,) = [s for s in broker.server.hub.sessions if s.key == key]
    assert dict(session.inbox) == {}
    await r.close()


async def test_a_member_leaves_no_progress_of_queues_it_unsubscribed(
    broker, catalog, clients, redis_url
):
    """A fan-out subscriber without a clientId is a member of its own (``~<connection id>``)
    that never comes back. Its deliveries stay tracked after an unsubscribe (§7); when the
    connection closes its progress goes for every queue it subscribed to — it went only
    for those still subscribed, so a connection subscribing to queue after queue left one
    member's keys per queue for good."""
    keeper = await clients()
    r, key = await _connect(broker.port, catalog.token)
    for i in range(5):
        queue = f"members{i}"
        await keeper.create_queue(queue, deliveryMode="FanOutWithAck")
        await _subscribe(r, queue)
        await keeper.publish(queue, i, message_id=f"m{i}")
        delivered = await r.recv()
        assert delivered["type"] == "deliver"
        r.send({"id": "u", "type": "unsubscribe", "queue": queue})
        assert (await r.recv())["type"] == "unsubscribeAck"
        # acked after the unsubscribe: it still settles (nothing comes back below)
        r.send({"id": "a", "type": "ack", "headers": {"messageId": f"m{i}"}})
    # subscribed again, it is a member from the queue's dispatch mark, as any newcomer
    await _subscribe(r, "members0")
    await keeper.publish("members0", "again", message_id="again")
    assert (await r.recv())["id"] == "again"
    r.send({"id": "a", "type": "ack", "headers": {"messageId": "again"}})
    await r.close()
    assert await _member_keys_left(redis_url, key, within=2.5) == []


async def test_a_closed_connection_is_freed_without_a_collection(broker, catalog):
    """A session and its protocol are freed once the close is handled, not at a full
    collection of the cyclic garbage (rare with the broker's raised GC thresholds): the
    two referred to each other, and every closed connection waited for one."""
    gc.collect()
    gc.disable()
    try:
        r, key = await _connect(broker.port, catalog.token)
        await _subscribe(r, "freed")
        (session,) = [s for s in broker.server.hub.sessions if s.key == key]
        gone = weakref.ref(session), weakref.ref(session.transport)
        del session
        await r.close()
        await until(lambda: all(ref() is None for ref in gone), what="freed after the close")
    finally:
        gc.enable()


async def test_a_member_whose_connection_closes_during_its_join_leaves_nothing(
    broker, catalog, clients, redis_url, monkeypatch
):
    """The connection drops while the fan-out join's reply is on its way: the member
    exists in Redis, the subscription was never acknowledged; the close leaves the group
    all the same (it left only the queues it knew it had joined)."""
    keeper = await clients()
    await keeper.create_queue("joining", deliveryMode="FanOutWithAck")
    real_join = broker.engine.join
    joined = asyncio.Event()

    async def reply_lost_on_the_way(*args, **kwargs):
        result = await real_join(*args, **kwargs)
        joined.set()
        await asyncio.sleep(60)
        return result

    monkeypatch.setattr(broker.engine, "join", reply_lost_on_the_way)
    r, key = await _connect(broker.port, catalog.token)
    r.send({"id": "s", "type": "subscribe", "queue": "joining"})
    await asyncio.wait_for(joined.wait(), 5)
    r.writer.transport.abort()
    assert await _member_keys_left(redis_url, key) == []


async def test_a_member_whose_lease_comes_back_after_its_close_leaves_nothing(
    broker, catalog, clients, redis_url, monkeypatch
):
    """A dispatch round leases for a member while its connection closes: Redis runs the
    close's leave first, then the lease, which makes the member's progress again. The
    dispatcher, finding the member closed when the lease comes back, has it leave again
    (before, those keys stayed for good: one set per such race)."""
    keeper = await clients()
    await keeper.create_queue("racing", deliveryMode="FanOutWithAck")
    r, key = await _connect(broker.port, catalog.token)
    await _subscribe(r, "racing")
    real_lease = broker.engine.lease
    holding, release_it, leased = asyncio.Event(), asyncio.Event(), asyncio.Event()

    async def lease_after_the_close(*args, **kwargs):
        if key in (kwargs.get("client_id") or ""):
            holding.set()
            await release_it.wait()
            try:
                return await real_lease(*args, **kwargs)
            finally:
                leased.set()
        return await real_lease(*args, **kwargs)

    monkeypatch.setattr(broker.engine, "lease", lease_after_the_close)
    await keeper.publish("racing", "x", message_id="x")
    await asyncio.wait_for(holding.wait(), 5)
    r.writer.transport.abort()
    assert await _member_keys_left(redis_url, key) == []  # the close's leave ran
    release_it.set()
    await asyncio.wait_for(leased.wait(), 5)
    assert await _member_keys_left(redis_url, key) == []
