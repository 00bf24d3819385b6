"""PubSub filters, RPC with several requests in flight, Temp queues, redelivery (§9, §10, §13)."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import orjson
import pytest

from brokers.clients.zbus import ZbusClient
from brokers.protocols.zbus import Message
from tests.zbus.conftest import Raw, create_temp_mq, msg

pytestmark = pytest.mark.django_db(transaction=True)


async def test_pubsub_topic_filters(broker) -> None:
    a, b, p = [await Raw.open(broker.port) for _ in range(3)]
    try:
        await a.send(msg("cmd: consume", "mq: news", "msgid: a", "topic: sport", "window: -1"))
        await a.send(msg("cmd: consume", "mq: news", "msgid: a2", "topic: tech", "window: -1"))
        await b.send(msg("cmd: consume", "mq: news", "msgid: b", "topic: *", "window: -1"))
        for _ in range(50):  # subscriptions register concurrently with this test
            await p.send(msg("cmd: admin", "sub_cmd: data"))
            info = orjson.loads((await p.recv()).body)["mqTable"]["news"]
            topics = [tuple(c["topics"]) for c in info["consumerInfoList"]]
            if sorted(topics) == [("*",), ("sport", "tech")]:
                break
        for topic, body in (
            ("sport", b"goal"),
            ("tech", b"chip"),
            ("food", b"soup"),
            (None, b"bare"),
        ):
            lines = ["cmd: produce", "mq: news", f"msgid: {body.decode()}"]
            if topic:
                lines.append(f"topic: {topic}")
            await p.send(msg(*lines, body=body))
            assert (await p.recv()).status == 200
        got_a = [await a.recv() for _ in range(2)]
        assert [m.body for m in got_a] == [b"goal", b"chip"]
        assert got_a[0].msgid == "a2" and got_a[0].msgid_raw == "goal"  # the producer's id
        assert [(await b.recv()).body for _ in range(4)] == [b"goal", b"chip", b"soup", b"bare"]
        assert await a.silent(0.2)
    finally:
        for r in (a, b, p):
            await r.close()


async def test_rpc_several_requests_in_flight_out_of_order(broker) -> None:
    requester, worker = await Raw.open(broker.port), await Raw.open(broker.port)
    try:
        for i in range(3):
            await requester.send(
                msg("cmd: request", "mq: svc", f"msgid: r{i}", body=f"q{i}".encode())
            )
        await worker.send(msg("cmd: consume", "mq: svc", "msgid: w", "window: 3"))
        calls = [await worker.recv() for _ in range(3)]
        assert [c.body for c in calls] == [b"q0", b"q1", b"q2"]
        assert all(c.headers["ack"] == "0" and c.msgid == "w" for c in calls)
        reply_queue = calls[0].mq_reply
        for call in reversed(calls):  # answer in reverse order, response-shaped
            await worker.send(
                msg(
                    "cmd: produce",
                    f"mq: {call.mq_reply}",
                    f"msgid: {call.msgid_raw}",
                    "ack: 0",
                    start="HTTP/1.1 201 Created",
                    body=b"re:" + call.body,
                )
            )
        replies = {m.msgid: m for m in [await requester.recv() for _ in range(3)]}
        assert {k: (m.status, m.body) for k, m in replies.items()} == {
            f"r{i}": (201, f"re:q{i}".encode()) for i in range(3)
        }
        assert await worker.silent(0.1)  # ack: 0 — the worker got no produce replies
        await requester.send(msg("cmd: admin", "sub_cmd: data"))
        table = orjson.loads((await requester.recv()).body)["mqTable"]
        assert table[reply_queue]["mode"] == 5
    finally:
        await requester.close()
        await worker.close()
    async with ZbusClient("127.0.0.1", broker.port, timeout=5) as c:
        for _ in range(50):
            if reply_queue not in (await c.data())["mqTable"]:
                break
            await asyncio.sleep(0.02)
        assert reply_queue not in (await c.data())["mqTable"]  # Temp MQs vanish with their owner


async def test_requests_on_a_registered_reply_queue_skip_the_task(broker, monkeypatch) -> None:
    """The first request opens and registers the reply queue (a task); later ones are
    stored as they are decoded — with what the task path stores: ``ack: 0``, the reply
    queue, ``cmd: request``, no token — and their replies come back the same way."""
    from brokers.servers.zbus import dispatch as dispatch_module

    tasked: list[str] = []
    real = dispatch_module.dispatch

    def counting(ctx, conn, message):
        tasked.append(message.command)
        return real(ctx, conn, message)

    monkeypatch.setattr(dispatch_module, "dispatch", counting)
    requester, worker = await Raw.open(broker.port), await Raw.open(broker.port)
    try:
        await worker.send(msg("cmd: consume", "mq: svc", "msgid: w", "window: -1"))
        await requester.send(msg("cmd: request", "mq: svc", "msgid: r0", body=b"q0"))
        first = await worker.recv()
        await requester.send(
            msg("cmd: request", "mq: svc", "msgid: r1", "token: none", body=b"q1")
            + msg("cmd: request", "mq: svc", "msgid: r2", body=b"q2")
        )
        calls = [first, await worker.recv(), await worker.recv()]
        assert tasked.count("request") == 1
        assert [c.body for c in calls] == [b"q0", b"q1", b"q2"]
        for c in calls:
            assert (c.headers["ack"], c.headers["cmd"], c.mq_reply) == (
                "0",
                "request",
                first.mq_reply,
            )
            assert "token" not in c.headers
        for call in calls:
            await worker.send(
                msg("cmd: produce", f"mq: {call.mq_reply}", f"msgid: {call.msgid_raw}", "ack: 0",
                    body=b"re:" + call.body)
            )  # fmt: skip
        replies = {m.msgid: m.body for m in [await requester.recv() for _ in range(3)]}
        assert replies == {f"r{i}": f"re:q{i}".encode() for i in range(3)}
    finally:
        await requester.close()
        await worker.close()


async def test_requests_keep_their_order_while_the_reply_queue_registers(
    broker, monkeypatch
) -> None:
    """A request made while its reply queue is still being registered is not stored
    ahead of the ones waiting for that registration."""
    from brokers.servers.zbus import temp as temp_module

    real = temp_module._register

    async def slow(temp):
        await asyncio.sleep(0.3)
        await real(temp)

    monkeypatch.setattr(temp_module, "_register", slow)
    requester, worker = await Raw.open(broker.port), await Raw.open(broker.port)
    try:
        await worker.send(msg("cmd: consume", "mq: svc", "msgid: w", "window: -1"))
        for i in range(3):
            await requester.send(msg("cmd: request", "mq: svc", f"msgid: r{i}", body=b"q%d" % i))
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.4)
        await requester.send(msg("cmd: request", "mq: svc", "msgid: r3", body=b"q3"))
        assert [(await worker.recv()).body for _ in range(4)] == [b"q0", b"q1", b"q2", b"q3"]
    finally:
        await requester.close()
        await worker.close()


async def test_request_now_waits_for_requests_still_registering(broker) -> None:
    """While a request of the task path waits for its reply queue's registration, a
    later one of that queue takes the task path too (it would be stored first)."""
    from brokers.protocols.zbus import Decoder
    from brokers.servers.zbus.request import request_now

    requester = await Raw.open(broker.port)
    try:
        await requester.send(msg("cmd: request", "mq: svc", "msgid: r0", body=b"q0"))
        server = broker.server
        for _ in range(100):
            conns = [p.conn for p in server._connections if p.conn.session_id in server.ctx.temps]
            if conns and server.ctx.temps[conns[0].session_id].ready.done():
                break
            await asyncio.sleep(0.01)
        conn = conns[0]
        temp = server.ctx.temps[conn.session_id]
        (later,) = Decoder().feed(msg("cmd: request", "mq: svc", "msgid: r1", body=b"q1"))
        errors: list[BaseException] = []
        temp.registering = 1
        assert request_now(server.ctx, conn, later, lambda c, m, e: errors.append(e)) is None
        temp.registering = 0
        done = request_now(server.ctx, conn, later, lambda c, m, e: errors.append(e))
        assert done is not None
        assert await done == [None] and errors == []
    finally:
        await requester.close()


async def test_reply_overtaking_its_waiter_is_kept(broker) -> None:
    requester = await Raw.open(broker.port)
    try:
        await create_temp_mq(requester, "mybox")
        await requester.send(msg("cmd: produce", "mq: mybox", "msgid: x1", "ack: 0", body=b"early"))
        assert await requester.silent(0.1)
        await requester.send(msg("cmd: consume", "mq: mybox", "msgid: x1"))
        got = await requester.recv()
        assert (got.msgid, got.body) == ("x1", b"early")
    finally:
        await requester.close()


async def test_produces_to_a_temp_mq_of_this_broker_keep_its_token_and_order(broker) -> None:
    """Produces to a Temp MQ of the same broker (an RPC worker's replies) are put at once,
    a run of them in one write in order; its access token still holds (403 without)."""
    owner, producer = await Raw.open(broker.port), await Raw.open(broker.port)
    try:
        await create_temp_mq(owner, "box7", "tk")
        await producer.send(msg("cmd: produce", "mq: box7", "msgid: a", body=b"x"))
        assert (await producer.recv()).status == 403
        run = b"".join(
            msg("cmd: produce", "mq: box7", "msgid: a", "token: tk", body=b"m%d" % i)
            for i in range(3)
        )
        await producer.send(run)
        assert [(await producer.recv()).status for _ in range(3)] == [200, 200, 200]
        await owner.send(msg("cmd: consume", "mq: box7", "msgid: a", "token: tk", "window: 3"))
        got = [await owner.recv() for _ in range(3)]
        assert [(m.msgid, m.body) for m in got] == [("a", b"m0"), ("a", b"m1"), ("a", b"m2")]
        assert all("token" not in m.headers for m in got)
    finally:
        await owner.close()
        await producer.close()


async def test_a_catalog_mq_named_as_reply_queue_stays_a_catalog_mq(broker) -> None:
    """§10.2 creates the reply queue only if it does not exist: a request whose
    ``mq_reply`` names a catalog MQ leaves that MQ durable and shared (a Temp MQ of its
    name shadowed it: produces kept in memory, its consumers served nothing), and the
    worker's reply is stored there like any produce."""
    requester, worker, producer, consumer = [await Raw.open(broker.port) for _ in range(4)]
    try:
        await requester.send(
            msg("cmd: request", "mq: svc", "msgid: r1", "mq_reply: orders", body=b"q")
        )
        await worker.send(msg("cmd: consume", "mq: svc", "msgid: w", "window: 1"))
        call = await worker.recv()
        assert (call.body, call.headers["mq_reply"]) == (b"q", "orders")
        await producer.send(msg("cmd: produce", "mq: orders", "msgid: p1", body=b"payload"))
        assert (await producer.recv()).status == 200
        reply = msg("cmd: produce", "mq: orders", f"msgid: {call.headers['msgid_raw']}", body=b"r")
        await worker.send(reply)
        assert (await worker.recv()).status == 200
        await consumer.send(msg("cmd: consume", "mq: orders", "msgid: c", "window: 2"))
        got = [await consumer.recv() for _ in range(2)]
        assert [(m.msgid_raw, m.body) for m in got] == [("p1", b"payload"), ("r1", b"r")]
        assert await requester.silent(0.2)  # no waiter: the reply is in the MQ
    finally:
        for conn in (requester, worker, producer, consumer):
            await conn.close()


async def test_a_request_waits_on_a_guarded_temp_mq_only_with_its_token(broker) -> None:
    """Another connection's Temp MQ with an access token answers 403 to a request naming
    it as ``mq_reply`` without that token, as to a consume (its owner's replies went to
    whoever named it); with the token the request waits there."""
    owner, other, worker = [await Raw.open(broker.port) for _ in range(3)]
    try:
        await create_temp_mq(owner, "guarded", "tk")
        for _ in range(2):  # the first request takes the task path, the next the direct one
            await other.send(
                msg("cmd: request", "mq: svc", "msgid: x", "mq_reply: guarded", body=b"q")
            )
            assert (await other.recv()).status == 403
        await worker.send(
            msg("cmd: produce", "mq: guarded", "msgid: x", "token: tk", "ack: 0", body=b"secret")
        )
        assert await other.silent(0.3)
        await other.send(
            msg("cmd: request", "mq: svc", "msgid: y", "mq_reply: guarded", "token: tk", body=b"q")
        )
        assert await other.silent(0.2)  # accepted: no answer until the reply
        await worker.send(
            msg("cmd: produce", "mq: guarded", "msgid: y", "token: tk", "ack: 0", body=b"yours")
        )
        got = await other.recv()
        assert (got.msgid, got.body) == ("y", b"yours")
    finally:
        for conn in (owner, other, worker):
            await conn.close()


async def test_a_pubsub_temp_mq_copies_each_message_to_every_matching_subscriber(
    broker,
) -> None:
    """§7: a Temp MQ with the PubSub bit (mode 6) is pub/sub (§9.2): topics accumulate,
    each subscriber has its own buffer, a message without a topic reaches ``*`` only, the
    delivery has status 200 and the producer's msgid as ``msgid_raw``. (Every Temp MQ
    matched by msgid, as a reply queue does: subscribers got nothing.)"""
    owner, narrow, wide, producer = [await Raw.open(broker.port) for _ in range(4)]
    try:
        body = orjson.dumps({"mqName": "tps", "mqMode": 6})
        await owner.send(msg("cmd: admin", "sub_cmd: create_mq", "msgid: t", body=body))
        assert (await owner.recv()).status == 200
        await narrow.send(msg("cmd: consume", "mq: tps", "msgid: n1", "topic: a", "window: -1"))
        await wide.send(msg("cmd: consume", "mq: tps", "msgid: w1", "topic: *", "window: 1"))
        await asyncio.sleep(0.1)
        for msgid, topic in (("p1", "topic: a"), ("p2", "topic: b"), ("p3", None)):
            lines = ["cmd: produce", "mq: tps", f"msgid: {msgid}", "reply_code: 500"]
            await producer.send(msg(*lines, *([topic] if topic else []), body=msgid.encode()))
            assert (await producer.recv()).status == 200
        got = await narrow.recv()
        assert (got.status, got.msgid, got.msgid_raw, got.body) == (200, "n1", "p1", b"p1")
        assert await narrow.silent(0.2)  # p2 is topic b, p3 has none
        got = await wide.recv()
        assert (got.status, got.msgid, got.msgid_raw) == (200, "w1", "p1")
        assert await wide.silent(0.2)  # its window was 1: the rest waits in its buffer
        await wide.send(msg("cmd: consume", "mq: tps", "msgid: w2", "window: 5"))
        got = [await wide.recv() for _ in range(2)]
        assert [(m.msgid, m.msgid_raw) for m in got] == [("w2", "p2"), ("w2", "p3")]
        await narrow.send(msg("cmd: consume", "mq: tps", "msgid: n2", "topic: b", "window: -1"))
        await asyncio.sleep(0.1)  # subscribed before the publish (pub/sub keeps no history)
        await producer.send(msg("cmd: produce", "mq: tps", "msgid: p4", "topic: b", body=b"x"))
        assert (await producer.recv()).status == 200
        assert (await narrow.recv()).msgid_raw == "p4"  # its topics now a and b
    finally:
        for conn in (owner, narrow, wide, producer):
            await conn.close()


async def test_client_rpc_with_worker(broker) -> None:
    async with (
        ZbusClient("127.0.0.1", broker.port, timeout=5) as caller,
        ZbusClient("127.0.0.1", broker.port, timeout=5) as worker,
    ):

        async def serve() -> None:
            async for call in worker.stream("svc"):
                worker.reply(call, call.body.upper(), status=200)

        task = asyncio.create_task(serve())
        try:
            answers = await asyncio.gather(*(caller.request("svc", f"ping{i}") for i in range(8)))
            assert [a.body for a in answers] == [f"PING{i}".encode() for i in range(8)]
        finally:
            task.cancel()


async def test_abandoned_delivery_is_redelivered(broker) -> None:
    first = await Raw.open(broker.port)
    await first.send(msg("cmd: produce", "mq: orders", "msgid: p1", body=b"precious"))
    await first.recv()
    await first.send(msg("cmd: consume", "mq: orders", "msgid: c1"))
    assert (await first.recv()).body == b"precious"
    await first.close()  # gone before settling it with another consume
    second = await Raw.open(broker.port)
    try:
        await second.send(msg("cmd: consume", "mq: orders", "msgid: c2"))
        again = await second.recv()
        assert (again.body, again.headers.get("redelivered")) == (b"precious", "1")
        await second.send(msg("cmd: consume", "mq: orders", "msgid: c3"))  # settles it
        assert await second.silent(0.2)
    finally:
        await second.close()


async def test_timeout_resend_learns_and_retires(broker) -> None:
    raw = await Raw.open(broker.port)
    try:
        await raw.send(msg("cmd: consume", "mq: orders", "msgid: c1"))
        await asyncio.sleep(0.6)  # the client's local timeout in this test
        await raw.send(msg("cmd: consume", "mq: orders", "msgid: c2"))  # re-sent: T learned
        await asyncio.sleep(0.6)  # c2 is retired silently at 0.8·T
        p = await Raw.open(broker.port)
        await p.send(msg("cmd: produce", "mq: orders", "msgid: p", body=b"safe"))
        await p.recv()
        await p.close()
        assert await raw.silent(0.2)  # nothing goes to the abandoned c2
        await raw.send(msg("cmd: consume", "mq: orders", "msgid: c3"))
        got = await raw.recv()
        assert (got.msgid, got.body) == ("c3", b"safe")
    finally:
        await raw.close()


async def raced_delivery(broker, raw: Raw) -> None:
    """``raw`` consumes ``orders`` as c1 and is delivered "raced" late in the assumed
    1 s client timeout: a consume right after it races the client's own timeout."""
    await raw.send(msg("cmd: consume", "mq: orders", "msgid: c1"))
    await asyncio.sleep(0.85)
    p = await Raw.open(broker.port)
    await p.send(msg("cmd: produce", "mq: orders", "msgid: p", body=b"raced"))
    await p.recv()
    await p.close()
    assert (await raw.recv()).msgid == "c1"


async def test_first_timeout_race_costs_a_redelivery(broker) -> None:
    raw = await Raw.open(broker.port)
    try:
        await raced_delivery(broker, raw)
        await raw.send(msg("cmd: consume", "mq: orders", "msgid: c2"))  # the client's re-send
        again = await raw.recv()
        assert (again.msgid, again.body, again.headers.get("redelivered")) == ("c2", b"raced", "1")
    finally:
        await raw.close()


async def test_consumes_read_together_take_effect_in_order(broker) -> None:
    """A consume that must wait (it releases a raced delivery first, a task's work) and
    the one sent right behind it in the same write: the later one replaces the earlier
    and gets the released message."""
    raw = await Raw.open(broker.port)
    try:
        await raced_delivery(broker, raw)
        await raw.send(
            msg("cmd: consume", "mq: orders", "msgid: c2")
            + msg("cmd: consume", "mq: orders", "msgid: c3")
        )
        again = await raw.recv()
        assert (again.msgid, again.body, again.headers.get("redelivered")) == ("c3", b"raced", "1")
        assert await raw.silent(0.3)
    finally:
        await raw.close()


@pytest.mark.parametrize("mode", [4, 5])
async def test_a_temp_queue_made_by_create_mq_is_a_queue_of_its_own(broker, mode) -> None:
    """§7: without the PubSub bit a Temp MQ is a queue (§9.1): what is produced waits in
    order and goes to its consumes round robin under each consume's msgid, within its
    window. (It was a reply queue: a consume got only messages of its own msgid, and the
    others were dropped after reply_ttl without a word.)"""
    owner, producer, second = [await Raw.open(broker.port) for _ in range(3)]
    try:
        body = orjson.dumps({"mqName": f"work{mode}", "mqMode": mode})
        await owner.send(msg("cmd: admin", "sub_cmd: create_mq", "msgid: t", body=body))
        assert (await owner.recv()).status == 200
        mq = f"mq: work{mode}"
        for i in range(5):
            await producer.send(msg("cmd: produce", mq, f"msgid: p{i}", body=b"m%d" % i))
            assert (await producer.recv()).status == 200
        await owner.send(msg("cmd: consume", mq, "msgid: cons", "window: 2"))
        got = [await owner.recv() for _ in range(2)]
        assert [(m.msgid, m.msgid_raw, m.body) for m in got] == [
            ("cons", "p0", b"m0"),
            ("cons", "p1", b"m1"),
        ]
        assert await owner.silent(0.1)  # its window is used up
        data = orjson.loads((await _admin_data(producer)).body)
        assert data["mqTable"][f"work{mode}"]["unconsumedMsgCount"] == 3
        # two streaming consumes share what is left and what comes, in turn
        await owner.send(msg("cmd: consume", mq, "msgid: a", "window: -1"))
        await second.send(msg("cmd: consume", mq, "msgid: b", "window: -1"))
        await asyncio.sleep(0.1)
        for i in range(5, 8):
            await producer.send(msg("cmd: produce", mq, f"msgid: p{i}", body=b"m%d" % i))
            assert (await producer.recv()).status == 200
        await asyncio.sleep(0.1)
        mine = await _drain(owner)
        theirs = await _drain(second)
        assert all(m.msgid == "a" for m in mine) and all(m.msgid == "b" for m in theirs)
        assert sorted(m.body for m in mine + theirs) == [b"m%d" % i for i in range(2, 8)]
        assert mine and theirs
        # a request naming it as its reply queue still gets its own reply
        await owner.send(msg("cmd: consume", mq, "msgid: a", "window: 0"))
        await second.close()
        await owner.send(msg("cmd: request", "mq: svc", "msgid: r1", f"mq_reply: work{mode}"))
        await producer.send(msg("cmd: produce", mq, "msgid: r1", "ack: 0", body=b"reply"))
        reply = await owner.recv()
        assert (reply.msgid, reply.body) == ("r1", b"reply")
    finally:
        for conn in (owner, producer, second):
            await conn.close()


async def test_a_temp_queue_holds_a_bounded_number_of_messages(broker) -> None:
    owner, producer = await Raw.open(broker.port), await Raw.open(broker.port)
    broker.server.ctx.config = replace(broker.server.ctx.config, pubsub_buffer=3)
    try:
        await create_temp_mq(owner, "small")
        for i in range(5):
            await producer.send(msg("cmd: produce", "mq: small", f"msgid: p{i}", body=b"%d" % i))
            assert (await producer.recv()).status == 200
        await owner.send(msg("cmd: consume", "mq: small", "msgid: c", "window: 5"))
        got = [await owner.recv() for _ in range(3)]
        assert [m.body for m in got] == [b"2", b"3", b"4"]  # the oldest two were dropped
        assert broker.server.ctx.temps["small"].dropped == 2
    finally:
        await owner.close()
        await producer.close()


async def _admin_data(conn: Raw) -> Message:
    await conn.send(msg("cmd: admin", "sub_cmd: data", "msgid: d"))
    return await conn.recv()


async def _drain(conn: Raw) -> list[Message]:
    out = []
    while True:
        try:
            out.append(await conn.recv(wait=0.2))
        except TimeoutError:
            return out


async def test_pubsub_and_rpc_on_mqs_called_by_names_no_code_can_be(broker) -> None:
    """A pub/sub MQ and a service MQ whose names hold ':' and CJK letters (zbus.md §7):
    subscribers, requests and replies reach them by those names."""
    async with ZbusClient("127.0.0.1", broker.port, timeout=5) as c:
        assert (await c.create_mq("新闻:体育", 2)).status == 200
        assert (await c.create_mq("服务:rpc", 1)).status == 200
    sub, worker, p = [await Raw.open(broker.port) for _ in range(3)]
    try:
        await sub.send(msg("cmd: consume", "mq: 新闻:体育", "msgid: s", "topic: *", "window: -1"))
        for _ in range(50):  # the subscription registers concurrently with this test
            await p.send(msg("cmd: admin", "sub_cmd: data"))
            info = orjson.loads((await p.recv()).body)["mqTable"]["新闻:体育"]
            if info["consumerInfoList"]:
                break
        await p.send(msg("cmd: produce", "mq: 新闻:体育", "msgid: g", "topic: x", body=b"goal"))
        assert (await p.recv()).status == 200
        got = await sub.recv()
        assert (got.body, got.msgid) == (b"goal", "s")
        await p.send(msg("cmd: request", "mq: 服务:rpc", "msgid: r1", body=b"q"))
        await worker.send(msg("cmd: consume", "mq: 服务:rpc", "msgid: w", "window: 1"))
        call = await worker.recv()
        assert call.body == b"q"
        reply = ["cmd: produce", f"mq: {call.headers['mq_reply']}", "msgid: r1", "ack: 0"]
        await worker.send(msg(*reply, body=b"a"))
        answer = await p.recv()
        assert (answer.body, answer.msgid) == (b"a", "r1")
    finally:
        for r in (sub, worker, p):
            await r.close()
