"""Delivery modes, flow control, overflow policies, TTL, retry and the DLQ (§7, §9–§12)."""

from __future__ import annotations

import asyncio

import pytest


async def drain(client, n: int, *, ack: bool = True) -> list:
    got = []
    for _ in range(n):
        m = await client.receive()
        got.append(m)
        if ack:
            client.ack(m.id)
    return got


async def nothing_more(client, wait: float = 0.3) -> bool:
    with pytest.raises(asyncio.TimeoutError):
        await client.receive(wait)
    return True


async def test_backlog_delivered_on_join_and_round_robin(clients):
    pub = await clients()
    for i in range(6):
        await pub.publish("rr", i, message_id=f"m{i}")
    a = await clients()
    await a.subscribe("rr")  # the backlog waits for no new publish
    first = await drain(a, 6)
    assert [m.payload for m in first] == list(range(6))
    b = await clients()
    await b.subscribe("rr")
    for i in range(10):
        await pub.publish("rr", i)
    got_a, got_b = [], []

    async def collect(c, into):
        while True:
            m = await c.receive()
            into.append(m.payload)
            c.ack(m.id)

    tasks = [asyncio.create_task(collect(a, got_a)), asyncio.create_task(collect(b, got_b))]
    for _ in range(100):
        if len(got_a) + len(got_b) == 10:
            break
        await asyncio.sleep(0.02)
    for t in tasks:
        t.cancel()
    assert sorted(got_a + got_b) == list(range(10))
    assert got_a and got_b  # both subscribers took turns


async def test_priority_based_is_stable_highest_first(clients):
    pub = await clients()
    await pub.create_queue("prio", deliveryMode="PriorityBased")
    order = [
        ("low", "l1"),
        ("normal", "n1"),
        ("critical", "c1"),
        ("HIGH", "h1"),
        ("low", "l2"),
        ("3", "c2"),
        (None, "n2"),
        ("bogus", "n3"),
        ("high", "h2"),
    ]
    for prio, mid in order:
        await pub.publish("prio", mid, priority=prio, message_id=mid)
    sub = await clients()
    await sub.subscribe("prio")
    got = [m.id for m in await drain(sub, len(order))]
    assert got == ["c1", "c2", "h1", "h2", "n1", "n2", "n3", "l1", "l2"]


async def test_max_unacked_flow_limit(catalog, redis_url):
    from dataclasses import replace

    from brokers.clients.vibemq import VibeMQClient
    from tests.vibemq.conftest import FAST, Broker

    b = Broker(1, redis_url)
    await b.start(replace(FAST, max_unacked_per_subscriber=3, ack_timeout_ms=30_000))
    try:
        c = await VibeMQClient.open("127.0.0.1", b.port, catalog.token)
        for i in range(5):
            await c.publish("flow", i)
        await c.subscribe("flow")
        first = await drain(c, 3, ack=False)
        assert await nothing_more(c)
        c.ack(first[0].id)
        [fourth] = await drain(c, 1, ack=False)
        assert fourth.payload == 3
        assert await nothing_more(c)
        await c.close()
    finally:
        await b.stop()


async def test_fanout_with_ack_tracks_and_retries_each_copy(clients, catalog):
    pub = await clients()
    await pub.create_queue(
        "fan", deliveryMode="FanOutWithAck", maxRetryAttempts="1", enableDeadLetterQueue="true"
    )
    a, b = await clients(), await clients()
    await a.subscribe("fan")
    await b.subscribe("fan")
    await pub.publish("fan", {"x": 1}, message_id="f1")
    ma, mb = await a.receive(), await b.receive()
    assert ma.id == mb.id == "f1" and ma.payload == mb.payload == {"x": 1}
    a.ack("f1")  # b does not ack: only b's copy is retried
    again = await b.receive(3)
    assert again.id == "f1" and again.attempts == 2
    assert await nothing_more(a, 0.2)
    # b never acks: after maxRetryAttempts its copy is dead-lettered, a's is not
    reader = await clients()
    await reader.subscribe("fan.dlq")
    dead = await reader.receive(5)
    assert dead.id == "f1" and dead.headers["deadLetterReason"] == "MaxRetriesExceeded"
    # deliveryAttempts counts this delivery from the DLQ (§7): its first
    assert dead.headers["originalQueue"] == "fan" and dead.attempts == 1
    reader.ack(dead.id)
    assert await nothing_more(reader, 0.3)


async def test_fanout_with_ack_copies_awaiting_ack_are_in_flight(clients):
    """queueInfo of a FanOutWithAck queue: a copy handed and not acked is in flight (a
    message is complete when every copy is acked, §9.1), as in the other modes."""
    pub = await clients()
    await pub.create_queue("fo-info", deliveryMode="FanOutWithAck")
    for i in range(3):
        await pub.publish("fo-info", i)
    info = await pub.queue_info("fo-info")
    assert (info["messageCount"], info["inFlightCount"]) == (3, 0)
    sub = await clients()
    await sub.subscribe("fo-info")
    got = await drain(sub, 3, ack=False)
    info = await pub.queue_info("fo-info")
    assert (info["messageCount"], info["inFlightCount"]) == (0, 3)
    for m in got:
        sub.ack(m.id)
    for _ in range(250):  # acks are coalesced: settled soon after
        info = await pub.queue_info("fo-info")
        if info["inFlightCount"] == 0:
            break
        await asyncio.sleep(0.02)
    assert (info["messageCount"], info["inFlightCount"]) == (0, 0)


async def test_fanout_without_ack_and_waiting_backlog(clients):
    pub = await clients()
    await pub.create_queue("news", deliveryMode="FanOutWithoutAck")
    await pub.publish("news", "early")  # no subscriber: it waits
    a = await clients()
    await a.subscribe("news")
    assert (await a.receive()).payload == "early"
    b = await clients()
    await b.subscribe("news")
    await pub.publish("news", "both")
    assert (await a.receive()).payload == "both"
    assert (await b.receive()).payload == "both"
    info = await pub.queue_info("news")
    assert info["messageCount"] == 0 and info["inFlightCount"] == 0
    assert info["subscriberCount"] == 2
    assert await nothing_more(a, 0.6)  # never redelivered: no tracking


@pytest.mark.parametrize(
    ("policy", "ack_headers", "kept", "dlq"),
    [
        ("DropOldest", {}, [2, 3], []),
        ("DropNewest", {"dropped": "true"}, [1, 2], []),
        ("RedirectToDlq", {"deadLettered": "true"}, [1, 2], [3]),
        ("BlockPublisher", None, [1, 2], []),
    ],
)
async def test_overflow_policies(clients, policy, ack_headers, kept, dlq):
    c = await clients()
    await c.create_queue("small", maxQueueSize="2", overflowStrategy=policy)
    await c.publish("small", 1)
    await c.publish("small", 2)
    if ack_headers is None:
        with pytest.raises(Exception, match="QUEUE_FULL"):
            await c.publish("small", 3)
    else:
        ack = await c.publish("small", 3)
        assert {k: ack.headers[k] for k in ack_headers} == ack_headers
        assert set(ack.headers) - set(ack_headers) == {"messageId", "queueName"}
    assert (await c.queue_info("small"))["messageCount"] == 2
    await c.subscribe("small")
    assert [m.payload for m in await drain(c, 2)] == kept
    if dlq:
        await c.subscribe("small.dlq")
        dead = await c.receive()
        assert dead.payload == 3 and dead.headers["deadLetterReason"] == "QueueOverflow"


@pytest.mark.parametrize(
    ("policy", "ack_headers", "kept"),
    [
        ("DropOldest", {}, ["high", "normal"]),
        ("DropNewest", {"dropped": "true"}, ["high", "low"]),
        ("RedirectToDlq", {"deadLettered": "true"}, ["high", "low"]),
        ("BlockPublisher", None, ["high", "low"]),
    ],
)
async def test_overflow_bounds_a_priority_queue_not_each_band(clients, policy, ack_headers, kept):
    """maxQueueSize counts the queue (§8, §9.2), whatever the priorities published: a
    third message in another band meets the policy; DropOldest drops the oldest queued."""
    c = await clients()
    await c.create_queue(
        "pbound", deliveryMode="PriorityBased", maxQueueSize="2", overflowStrategy=policy
    )
    await c.publish("pbound", "low", priority="low")
    await c.publish("pbound", "high", priority="high")
    if ack_headers is None:
        with pytest.raises(Exception, match="QUEUE_FULL"):
            await c.publish("pbound", "normal", priority="normal")
    else:
        ack = await c.publish("pbound", "normal", priority="normal")
        assert {k: ack.headers[k] for k in ack_headers} == ack_headers
    info = await c.queue_info("pbound")
    assert (info["messageCount"], info["maxSize"]) == (2, 2)
    await c.subscribe("pbound")
    assert [m.payload for m in await drain(c, 2)] == kept
    assert await nothing_more(c, 0.2)


async def test_ttl_is_enforced_and_dead_lettered(clients):
    c = await clients()
    await c.create_queue("ttl", messageTtl="200", enableDeadLetterQueue="true")
    await c.publish("ttl", "stale", message_id="old")
    await asyncio.sleep(0.5)  # the broker's sweep expires it without any subscriber
    info = await c.queue_info("ttl")
    assert info["messageCount"] == 0
    await c.publish("ttl", "fresh", message_id="new")
    await c.subscribe("ttl")
    got = await c.receive()
    assert got.id == "new"
    c.ack(got.id)
    await c.subscribe("ttl.dlq")
    dead = await c.receive()
    assert dead.id == "old" and dead.headers["deadLetterReason"] == "MessageExpired"
    assert dead.headers["originalQueue"] == "ttl" and "deadLetteredAt" in dead.headers


async def test_ack_timeout_redelivery_then_dlq(clients):
    c = await clients()
    await c.create_queue("retry", maxRetryAttempts="2", enableDeadLetterQueue="true")
    await c.publish("retry", "work", message_id="w", headers={"trace": "t1"})
    await c.subscribe("retry")
    attempts = [(await c.receive(5)).attempts for _ in range(3)]  # never acked
    assert attempts == [1, 2, 3]
    await c.subscribe("retry.dlq")
    dead = await c.receive(5)
    assert dead.queue == "retry.dlq" and dead.id == "w"
    assert dead.headers["deadLetterReason"] == "MaxRetriesExceeded"
    assert dead.attempts == 1 and dead.headers["trace"] == "t1"
    c.ack("w")
    info = await c.queue_info("retry")
    assert info["messageCount"] == 0 and info["inFlightCount"] == 0


async def test_ack_by_headers_message_id_and_unknown_ack_ignored(raw, catalog):
    from tests.vibemq.test_commands import connected

    r = await connected(raw, catalog)
    r.send({"id": "p", "type": "publish", "queue": "acks", "payload": 1})
    await r.recv()
    r.send({"id": "s", "type": "subscribe", "queue": "acks"})
    await r.recv()
    assert (await r.recv())["id"] == "p"
    r.send({"id": "a-1", "type": "ack", "headers": {"messageId": "nope"}})  # ignored
    r.send({"id": "a-2", "type": "ack", "headers": {"messageId": "p"}})
    r.send({"id": "i", "type": "queueInfo", "queue": "acks"})
    info = (await r.recv())["payload"]  # the only reply: acks have none
    assert info["inFlightCount"] == 0 and info["messageCount"] == 0


async def test_a_named_dead_letter_queue_takes_the_dead_letters(clients):
    """§8 ``deadLetterQueueName`` (broker extension): dead letters go to the queue it names
    instead of ``<queue>.dlq`` (it was refused unless it named the default)."""
    c = await clients()
    info = await c.create_queue(
        "named",
        maxRetryAttempts="1",
        enableDeadLetterQueue="true",
        deadLetterQueueName="failed-named",
    )
    assert info["deadLetterQueueName"] == "failed-named"
    assert "failed-named" in await c.list_queues()
    assert "named.dlq" not in await c.list_queues()
    await c.publish("named", "work", message_id="w")
    await c.subscribe("named")
    assert [(await c.receive(5)).attempts for _ in range(2)] == [1, 2]  # never acked
    await c.subscribe("failed-named")
    dead = await c.receive(5)
    assert (dead.queue, dead.id) == ("failed-named", "w")
    assert dead.headers["deadLetterReason"] == "MaxRetriesExceeded"
    assert dead.headers["originalQueue"] == "named"
    c.ack("w")
    assert (await c.queue_info("named"))["messageCount"] == 0


async def test_a_dead_letter_queue_name_is_checked(raw, catalog):
    from tests.vibemq.test_commands import connected

    r = await connected(raw, catalog)
    r.send({"id": "o", "type": "createQueue", "queue": "other"})
    assert (await r.recv())["type"] == "createQueue"
    for name, code in (("self", "INVALID_QUEUE"), ("bad name", "INVALID_QUEUE"),
                       ("other", "QUEUE_EXISTS")):  # fmt: skip
        r.send(
            {
                "id": "x",
                "type": "createQueue",
                "queue": "self",
                "headers": {"enableDeadLetterQueue": "true", "deadLetterQueueName": name},
            }
        )
        assert (await r.recv())["errorCode"] == code, name
    r.send({"id": "l", "type": "listQueues"})
    assert (await r.recv())["payload"] == ["other"]  # nothing was created
    # the default name too, when dead letters would go there: a queue called
    # <queue>.dlq made first (by anyone) is not this queue's dead-letter queue
    r.send({"id": "d", "type": "createQueue", "queue": "late.dlq"})
    assert (await r.recv())["type"] == "createQueue"
    for headers in ({"enableDeadLetterQueue": "true"}, {"overflowStrategy": "RedirectToDlq"}):
        r.send({"id": "y", "type": "createQueue", "queue": "late", "headers": headers})
        refused = await r.recv()
        assert (refused["errorCode"], refused["errorMessage"]) == (
            "QUEUE_EXISTS",
            "dead-letter queue late.dlq exists",
        ), headers
    r.send({"id": "z", "type": "createQueue", "queue": "late"})  # no dead letters: fine
    assert (await r.recv())["type"] == "createQueue"


async def test_a_retry_goes_to_the_same_connection_while_it_is_subscribed(clients):
    """§7: "A retry goes to the same connection if it is still connected and subscribed."
    (Retries went to the group: A, then B, then A.) Once it unsubscribes, the next retry
    goes to the others."""
    pub, a, b = await clients(), await clients(), await clients()
    await pub.create_queue("sticky", maxRetryAttempts="5")
    await a.subscribe("sticky")
    await pub.publish("sticky", "job", message_id="j")
    got = await a.receive(5)
    assert (got.id, got.attempts) == ("j", 1)
    await b.subscribe("sticky")  # a competitor with room: the retries still go to A
    for attempt in (2, 3):  # never acked
        again = await a.receive(5)
        assert (again.id, again.attempts) == ("j", attempt)
    assert await nothing_more(b, 0.2)
    await a.unsubscribe("sticky")
    moved = await b.receive(5)
    assert (moved.id, moved.attempts) == ("j", 4)
    b.ack("j")
    await asyncio.sleep(0.3)
    info = await pub.queue_info("sticky")
    assert info["messageCount"] == 0 and info["inFlightCount"] == 0


async def test_an_expired_delivery_is_not_retried_to_its_connection(clients):
    """§11: "an expired message still in flight is not retried" — kept for the same
    connection's retry (§7) or not: past its TTL it goes to the DLQ instead."""
    c = await clients()
    await c.create_queue("shortlived", messageTtl="300", enableDeadLetterQueue="true")
    await c.subscribe("shortlived")
    await c.publish("shortlived", "soon stale", message_id="s")
    assert (await c.receive(5)).id == "s"  # never acked; the ack timeout is 400 ms
    await c.subscribe("shortlived.dlq")
    dead = await c.receive(5)
    assert (dead.queue, dead.id) == ("shortlived.dlq", "s")
    assert dead.headers["deadLetterReason"] == "MessageExpired"
    assert await nothing_more(c, 0.5)


async def test_every_delivery_that_times_out_together_is_retried_to_its_connection(clients):
    """A subscriber that hangs with several unacked deliveries gets each of them again
    (their keeps go to the engine together, in one tick)."""
    pub, a, b = await clients(), await clients(), await clients()
    await pub.create_queue("stuck", maxRetryAttempts="3")
    await a.subscribe("stuck")
    for i in range(3):
        await pub.publish("stuck", i, message_id=f"s{i}")
    first = [await a.receive(5) for _ in range(3)]
    assert sorted(m.id for m in first) == ["s0", "s1", "s2"]
    await b.subscribe("stuck")
    again = [await a.receive(5) for _ in range(3)]
    assert sorted((m.id, m.attempts) for m in again) == [("s0", 2), ("s1", 2), ("s2", 2)]
    for m in again:
        a.ack(m.id)
    assert await nothing_more(b, 0.3)


async def test_a_message_over_the_frame_limit_fails_instead_of_closing_the_consumer(
    clients, broker
):
    """A message stored by a protocol with larger messages (here 1.1 MiB, as a JMQ4 or
    HTTP-MQ producer may send) cannot go out in a ``deliver`` frame: a client closes the
    connection on a frame over 1 MiB (§1), and got it again on every reconnect. It is not
    written: each attempt fails at once, and past the attempt limit it is dead-lettered;
    the subscriber goes on with the next messages on the same connection."""
    from brokers.engine import Message

    c = await clients()
    await c.create_queue("big", maxRetryAttempts="1", enableDeadLetterQueue="true")
    await broker.engine.append("big", "app1", [Message(b"x" * (1_100_000))])
    await c.publish("big", "small", message_id="s1")
    await c.subscribe("big")
    got = await c.receive(5)
    assert (got.id, got.payload) == ("s1", "small")
    c.ack("s1")
    for _ in range(100):  # attempt 1, the backoff, attempt 2, then the dead letter
        dead = await c.queue_info("big.dlq")
        if dead["messageCount"] == 1:
            break
        await asyncio.sleep(0.05)
    assert dead["messageCount"] == 1
    info = await c.queue_info("big")
    assert info["messageCount"] == 0 and info["inFlightCount"] == 0
    assert broker.server.ctx.counters["oversize"] == 2  # both attempts
    await c.publish("big", "after", message_id="s2")
    assert (await c.receive(5)).id == "s2"  # the same connection, still open


async def test_oversize_messages_leased_together_all_fail(clients, broker):
    """Several messages over the frame limit in one lease fail together (one engine call
    per partition): each is dead-lettered past its attempts, none is written."""
    from brokers.engine import Message

    c = await clients()
    await c.create_queue("bigs", maxRetryAttempts="1", enableDeadLetterQueue="true")
    big = [Message(b"x" * 1_100_000), Message(b"y" * 1_100_000)]
    await broker.engine.append("bigs", "app1", big, partition=0)
    await c.subscribe("bigs")
    for _ in range(100):
        dead = await c.queue_info("bigs.dlq")
        if dead["messageCount"] == 2:
            break
        await asyncio.sleep(0.05)
    assert dead["messageCount"] == 2
    info = await c.queue_info("bigs")
    assert info["messageCount"] == 0 and info["inFlightCount"] == 0
    assert broker.server.ctx.counters["oversize"] == 4  # two attempts each
    await c.publish("bigs", "after", message_id="s3")
    assert (await c.receive(5)).id == "s3"
