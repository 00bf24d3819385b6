"""Pipelined publishes (§4, §6): frames written back to back are stored in runs, yet every
reply comes in the frames' order, errors included, and each publishAck means stored."""

from __future__ import annotations

import asyncio
from dataclasses import replace

from tests.vibemq.conftest import FAST, Broker, Raw, frame


async def test_pipelined_publishes_reply_in_order_with_errors_between(raw, catalog, broker):
    r = await raw()
    r.send({"id": "c", "type": "connect", "headers": {"authToken": catalog.token}})
    assert (await r.recv())["type"] == "connectAck"
    r.send(
        {
            "id": "q",
            "type": "createQueue",
            "queue": "tight",
            "headers": {"maxQueueSize": "5", "overflowStrategy": "BlockPublisher"},
        }
    )
    assert (await r.recv())["type"] == "createQueue"
    burst = b""
    expected = []
    for i in range(8):  # 5 fit, then QUEUE_FULL, interleaved with other queues and errors
        burst += frame({"id": f"t{i}", "type": "publish", "queue": "tight", "payload": i})
        expected.append((f"t{i}", "publishAck" if i < 5 else "error"))
        if i == 2:
            burst += frame({"id": "bad", "type": "publish", "queue": "no way", "payload": 0})
            expected.append(("bad", "error"))
            burst += frame({"id": "o1", "type": "publish", "queue": "other", "payload": 1})
            expected.append(("o1", "publishAck"))
        if i == 3:
            burst += frame({"id": "p", "type": "ping"})
            expected.append(("p", "pong"))
    r.send(burst)  # one write: the server reads them all before replying
    replies = [await r.recv() for _ in expected]
    assert [(m["id"], m["type"]) for m in replies] == expected
    assert {m["errorCode"] for m in replies if m["type"] == "error"} == {
        "INVALID_QUEUE",
        "QUEUE_FULL",
    }
    stats = await broker.engine.queue_stats("tight")
    assert stats.ready == 5
    taken = await broker.engine.lease("tight", "app1", count=10, owner="test")
    assert [d.message.body for d in taken.deliveries] == [b"0", b"1", b"2", b"3", b"4"]
    assert (await broker.engine.queue_stats("other")).ready == 1


async def test_a_long_burst_is_stored_whole_and_in_order(clients, broker):
    pub = await clients()
    n = 600  # more than one run
    await asyncio.gather(*(pub.publish("burst", i, message_id=f"b{i}") for i in range(n)))
    taken = await broker.engine.lease("burst", "app1", count=n, owner="test")
    assert [int(d.message.body) for d in taken.deliveries] == list(range(n))


async def test_a_burst_round_many_queues_is_stored_at_once_in_each_queues_order(
    raw, catalog, broker
):
    queues = [f"fleet{q}" for q in range(6)]
    r = await raw()
    r.send({"id": "c", "type": "connect", "headers": {"authToken": catalog.token}})
    assert (await r.recv())["type"] == "connectAck"
    for q in queues:  # created first: an auto-create would store the run before it
        r.send({"id": f"create-{q}", "type": "createQueue", "queue": q})
        assert (await r.recv())["type"] == "createQueue"
    calls = {"now": 0, "most": 0}
    append_many = broker.engine.append_many

    async def counted(*args, **kwargs):
        calls["now"] += 1
        calls["most"] = max(calls["most"], calls["now"])
        try:
            return await append_many(*args, **kwargs)
        finally:
            calls["now"] -= 1

    broker.engine.append_many = counted
    order = [(queues[(i * 5) % 6], i) for i in range(30)]  # the queues interleaved
    r.send(
        b"".join(
            frame({"id": f"m{i}", "type": "publish", "queue": q, "payload": i}) for q, i in order
        )
    )
    replies = [await r.recv() for _ in order]
    assert [(m["id"], m["type"]) for m in replies] == [(f"m{i}", "publishAck") for _, i in order]
    assert calls["most"] == len(queues)  # one call per queue, all at once
    for q in queues:
        taken = await broker.engine.lease(q, "app1", count=10, owner="test")
        assert [int(d.message.body) for d in taken.deliveries] == [i for p, i in order if p == q]


async def test_publishes_over_the_frame_rate_get_their_error_in_turn(catalog, redis_url):
    """Frames over the connection's frame rate are refused where they stand in a run of
    publishes round several queues: the replies keep the frames' order, and only the
    frames let through are stored."""
    b = Broker(1, redis_url)
    await b.start(replace(FAST, frames_per_second=6))
    r = await Raw.open(b.port)
    try:
        r.send({"id": "c", "type": "connect", "headers": {"authToken": catalog.token}})
        assert (await r.recv())["type"] == "connectAck"
        for q in ("left", "right"):  # created first: an auto-create stores the run before it
            r.send({"id": f"create-{q}", "type": "createQueue", "queue": q})
            assert (await r.recv())["type"] == "createQueue"
        await asyncio.sleep(1.1)  # a fresh second of frame rate
        order = [("left" if i % 2 else "right", i) for i in range(9)]
        r.send(
            b"".join(
                frame({"id": f"m{i}", "type": "publish", "queue": q, "payload": i})
                for q, i in order
            )
        )
        replies = [await r.recv() for _ in order]
        assert [m["id"] for m in replies] == [f"m{i}" for _, i in order]
        assert [m["type"] for m in replies] == ["publishAck"] * 6 + ["error"] * 3
        assert {m["errorCode"] for m in replies[6:]} == {"RATE_LIMITED"}
        for q in ("left", "right"):
            taken = await b.engine.lease(q, "app1", count=10, owner="test")
            assert [int(d.message.body) for d in taken.deliveries] == [
                i for p, i in order[:6] if p == q
            ]
    finally:
        await r.close()
        await b.stop()
