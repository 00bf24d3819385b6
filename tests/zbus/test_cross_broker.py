"""Two zbus servers on one Redis: RPC replies reach the broker holding the reply queue, Temp
MQ tokens hold across brokers, replies to vanished Temp MQs are dropped, replies without
ack take a reply queue found lately (and follow it when it moved), and MQ and PubSub
messages cross brokers through the store."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import msgspec
import pytest

from brokers.clients.zbus import ZbusClient
from brokers.engine.keys import mailbox_key
from brokers.servers.zbus.relay import (
    TEMP_MQS,
    RemoteTemp,
    decode_forward,
    encode_entry,
    encode_forward,
)
from tests.zbus.conftest import Broker_, Raw, create_temp_mq, msg, running_broker

pytestmark = pytest.mark.django_db(transaction=True)


def temp_key(name: str) -> str:
    """The registration of Temp MQ ``name`` (its engine mailbox)."""
    return mailbox_key(TEMP_MQS, name)


@pytest.fixture
async def other(broker: Broker_, redis_url: str) -> AsyncIterator[Broker_]:
    """A second zbus server (another process in production) on the same Redis."""
    async with running_broker(redis_url) as b:
        yield b


async def _gone(broker: Broker_, name: str) -> bool:
    """True once the registry entry of Temp MQ ``name`` is removed (bounded wait)."""
    for _ in range(100):
        if not await broker.redis.exists(temp_key(name)):
            return True
        await asyncio.sleep(0.01)
    return False


def _reply(call, body: bytes, *, ack: bool = False, token: str | None = None) -> bytes:
    lines = ["cmd: produce", f"mq: {call.mq_reply}", f"msgid: {call.msgid_raw}"]
    lines.append("ack: 1" if ack else "ack: 0")
    if token:
        lines.append(f"token: {token}")
    return msg(*lines, start="HTTP/1.1 200 OK", body=body)


async def test_rpc_requester_and_worker_on_different_brokers(broker, other) -> None:
    requester, worker = await Raw.open(broker.port), await Raw.open(other.port)
    try:
        n = 6
        for i in range(n):
            await requester.send(
                msg("cmd: request", "mq: svc", f"msgid: r{i}", body=f"q{i}".encode())
            )
        await worker.send(msg("cmd: consume", "mq: svc", "msgid: w", "window: -1"))
        calls = [await worker.recv() for _ in range(n)]
        assert sorted(c.body for c in calls) == sorted(f"q{i}".encode() for i in range(n))
        for call in reversed(calls):  # all in flight at once, answered out of order via B
            await worker.send(_reply(call, b"re:" + call.body))
        replies = {m.msgid: m.body for m in [await requester.recv() for _ in range(n)]}
        assert replies == {f"r{i}": f"re:q{i}".encode() for i in range(n)}
        assert await worker.silent(0.1)  # ack: 0 — no produce replies to the worker
    finally:
        await requester.close()
        await worker.close()


async def test_client_rpc_across_brokers(broker, other) -> None:
    async with (
        ZbusClient("127.0.0.1", broker.port, timeout=5) as caller,
        ZbusClient("127.0.0.1", other.port, timeout=5) as worker,
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


async def test_forwarded_reply_acked_and_reply_to_closed_owner_is_404(broker, other) -> None:
    requester, worker = await Raw.open(broker.port), await Raw.open(other.port)
    try:
        await requester.send(msg("cmd: request", "mq: svc", "msgid: r1", body=b"q"))
        await worker.send(msg("cmd: consume", "mq: svc", "msgid: w"))
        call = await worker.recv()
        await worker.send(_reply(call, b"answer", ack=True))
        acked = await worker.recv()
        assert (acked.status, acked.msgid) == (200, "r1")
        assert (await requester.recv()).body == b"answer"
        await requester.close()  # the reply queue vanishes, here and in the registry
        assert await _gone(broker, call.mq_reply)
        await worker.send(_reply(call, b"late", ack=True))
        late = await worker.recv()
        assert (late.status, late.body) == (404, f"MQ({call.mq_reply}) Not Found".encode())
    finally:
        await requester.close()
        await worker.close()


async def test_reply_to_a_dead_owner_is_dropped_with_a_log_line(broker, other, caplog) -> None:
    """A registration left by a broker that died (no one listens on its channel)."""
    await broker.redis.set(temp_key("orphan"), encode_entry("deadbeef", 5, ""), px=10_000)
    worker = await Raw.open(other.port)
    try:
        with caplog.at_level(logging.INFO, logger="mqcloud.zbus"):
            await worker.send(msg("cmd: produce", "mq: orphan", "msgid: x", body=b"lost"))
            got = await worker.recv()
        assert got.status == 404
        assert any("orphan is gone" in r.getMessage() for r in caplog.records)
    finally:
        await worker.close()


async def test_temp_mq_token_and_explicit_consume_across_brokers(broker, other) -> None:
    owner, producer = await Raw.open(broker.port), await Raw.open(other.port)
    try:
        await create_temp_mq(owner, "box9", "tk")
        await producer.send(msg("cmd: produce", "mq: box9", "msgid: a", body=b"x"))
        denied = await producer.recv()
        assert denied.status == 403
        await producer.send(msg("cmd: produce", "mq: box9", "msgid: a", "token: tk", body=b"hello"))
        assert (await producer.recv()).status == 200
        await owner.send(msg("cmd: consume", "mq: box9", "msgid: a", "token: tk"))
        got = await owner.recv()
        assert (got.msgid, got.body) == ("a", b"hello")
        # consuming another broker's Temp MQ is not offered: it is not found there
        await producer.send(msg("cmd: consume", "mq: box9", "msgid: c", "token: tk"))
        assert (await producer.recv()).status == 404
    finally:
        await owner.close()
        await producer.close()


async def test_queue_and_pubsub_across_brokers(broker, other) -> None:
    async with (
        ZbusClient("127.0.0.1", broker.port, timeout=5) as a,
        ZbusClient("127.0.0.1", other.port, timeout=5) as b,
    ):
        await a.produce("orders", "from-a")
        got = await b.consume("orders")
        assert got is not None and got.body == b"from-a"

        stream = a.stream("news", topic="*")
        pending = asyncio.ensure_future(stream.__anext__())
        for _ in range(50):  # wait until the subscription on A is registered
            if (await a.data())["mqTable"]["news"]["consumerCount"]:
                break
        await b.produce("news", "from-b", topic="t")
        delivered = await asyncio.wait_for(pending, 5)
        assert (delivered.status, delivered.body) == (200, b"from-b")
        await stream.aclose()


async def test_registration_is_renewed_while_the_owner_lives(broker) -> None:
    requester = await Raw.open(broker.port)
    try:
        await requester.send(msg("cmd: request", "mq: svc", "msgid: r1", body=b"q"))
        relay = broker.server.ctx.relay
        for _ in range(100):  # the request is stored after its reply queue is registered
            if (await broker.engine.queue_stats("svc")).ready:
                break
            await asyncio.sleep(0.01)
        (name,) = broker.server.ctx.temps
        assert 0 < await broker.redis.pttl(temp_key(name)) <= 30_000
        await broker.redis.delete(temp_key(name))  # e.g. lost with a Redis failover
        await relay.refresh()
        assert await broker.redis.get(temp_key(name)) == broker.server.ctx.temps[name].entry
    finally:
        await requester.close()


async def test_servers_report_for_the_tracker_only_while_clients_track(broker, other) -> None:
    """An MQ report costs Redis work in proportion to the catalog, so no server makes one
    until a client sends track_sub somewhere; then every server reports (zbus.md §11.4)."""
    from brokers.servers.zbus import track

    await asyncio.sleep(0.3)  # the reporters have ticked: nobody tracks
    assert await broker.engine.read_reports(track.BOARD) == {}
    async with ZbusClient("127.0.0.1", broker.port, timeout=5) as c:
        reply = await c.invoke({"cmd": "track_sub"})
        assert reply.status == 200
        seen: dict = {}
        for _ in range(160):  # the other server reports at its next tick
            seen = await broker.engine.read_reports(track.BOARD)
            if f"127.0.0.1:{other.port}" in seen:
                break
            await asyncio.sleep(0.05)
        assert {f"127.0.0.1:{broker.port}", f"127.0.0.1:{other.port}"} <= set(seen)


async def test_a_request_is_served_by_a_worker_of_the_broker_it_came_to(broker, other) -> None:
    """With a streaming worker on each broker, what a caller sends to A is claimed by A's
    worker (brokers.engine.notify, claims): B's worker is not woken for it, so the call
    does not cross brokers. Without a worker on A, B's serves A's callers at once."""
    here_worker, there_worker = await Raw.open(broker.port), await Raw.open(other.port)
    caller = await Raw.open(broker.port)
    try:
        for w in (here_worker, there_worker):
            await w.send(msg("cmd: consume", "mq: svc", "msgid: w", "window: -1"))
        await asyncio.sleep(0.2)  # both pumps parked
        n, crossed = 10, 0
        for i in range(n):
            await caller.send(msg("cmd: request", "mq: svc", f"msgid: r{i}", body=b"q"))
            try:
                call = await here_worker.recv(wait=1.0)
            except TimeoutError:  # taken by B's worker (a claim not honoured in time)
                call = await there_worker.recv()
                crossed += 1
                await there_worker.send(_reply(call, b"re"))
            else:
                await here_worker.send(_reply(call, b"re"))
            assert (await caller.recv()).msgid == f"r{i}"
        assert crossed <= 2  # woken at once, B's worker would have raced A's for each
        await here_worker.close()  # what it had not settled yet is delivered again to B's
        await asyncio.sleep(0.2)
        started = asyncio.get_running_loop().time()
        await caller.send(msg("cmd: request", "mq: svc", "msgid: last", body=b"last"))
        while (call := await there_worker.recv()).body != b"last":
            assert call.body == b"q"
        assert asyncio.get_running_loop().time() - started < 1.0
        await there_worker.send(_reply(call, b"re"))
        assert (await caller.recv()).msgid == "last"
    finally:
        for c in (here_worker, there_worker, caller):
            await c.close()


async def test_what_any_front_end_of_a_broker_appends_goes_to_its_parked_consumer(
    broker, other
) -> None:
    """Claims are the engine's: an append of broker A's engine — a JMQ4 or HTTP-MQ produce
    (``append``), VibeMQ's pipelined publishes (``append_many``) — is claimed by A's parked
    zbus long poll (window 1: room for one), not raced for by B's; with A's room spent,
    the next append wakes B's at once."""
    from asgiref.sync import sync_to_async
    from django.db import connection

    from brokers.anonymous import anonymous_app
    from brokers.engine import Message
    from brokers.models import Team

    def anonymous_code() -> str:
        try:
            return anonymous_app(Team.objects.get(name="team1")).code
        finally:
            connection.close()  # this thread's: the test database is dropped at the end

    app = await sync_to_async(anonymous_code)()
    here, there = await Raw.open(broker.port), await Raw.open(other.port)
    try:
        for append in (
            lambda body: broker.engine.append("orders", app, [Message(body)]),
            lambda body: broker.engine.append_many("orders", app, [Message(body)]),
        ):
            for c in (here, there):
                await c.send(msg("cmd: consume", "mq: orders", "msgid: c", "window: 1"))
            await asyncio.sleep(0.2)  # both parked, room for one each
            await append(b"near")
            assert (await here.recv()).body == b"near"
            await append(b"far")  # A's room is spent: B's long poll is woken at once
            started = asyncio.get_running_loop().time()
            assert (await there.recv()).body == b"far"
            assert asyncio.get_running_loop().time() - started < 1.0
        assert broker.engine.notifier.claims_made >= 2
        assert other.engine.notifier.wakes_skipped >= 2
    finally:
        await here.close()
        await there.close()


async def test_a_claim_whose_consumer_went_away_is_handed_back_at_once(broker, other) -> None:
    """A's long poll left between the claim and the lease (taken out of the pump's line
    behind its back): A's pump hands the claim back — it announces the MQ — and B's long
    poll gets the message at once, not after the claim's grace."""
    from asgiref.sync import sync_to_async
    from django.db import connection

    from brokers.anonymous import anonymous_app
    from brokers.engine import Message
    from brokers.engine.notify import CLAIM_GRACE
    from brokers.models import Team

    def anonymous_code() -> str:
        try:
            return anonymous_app(Team.objects.get(name="team1")).code
        finally:
            connection.close()

    app = await sync_to_async(anonymous_code)()
    here, there = await Raw.open(broker.port), await Raw.open(other.port)
    try:
        # the scripts loaded first (a first call meets NOSCRIPT: one more round trip, which
        # the hand-back's announcement could overtake — the grace covers that)
        await broker.engine.append("orders", app, [Message(b"warm")])
        await here.send(msg("cmd: consume", "mq: orders", "msgid: c", "window: 1"))
        assert (await here.recv()).body == b"warm"
        for c in (here, there):
            await c.send(msg("cmd: consume", "mq: orders", "msgid: c", "window: 1"))
        await asyncio.sleep(0.2)  # both parked, room for one each
        broker.server.ctx.queues["orders"].line.clear()
        loop = asyncio.get_running_loop()
        started = loop.time()
        await broker.engine.append("orders", app, [Message(b"handed")])
        assert (await there.recv()).body == b"handed"
        assert loop.time() - started < CLAIM_GRACE / 2
        assert broker.engine.notifier.claims_made == 1
        assert broker.engine.notifier.claims_left == 1
        assert await here.silent(0.2)
    finally:
        await here.close()
        await there.close()


@pytest.fixture
async def third(broker: Broker_, redis_url: str) -> AsyncIterator[Broker_]:
    """A third zbus server on the same Redis."""
    async with running_broker(redis_url) as b:
        yield b


def _count_lookups(b: Broker_, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names ``b`` looks up in the Temp MQ registry from now on."""
    mailboxes = b.server.ctx.relay.mailboxes
    asked: list[str] = []
    lookup = mailboxes.lookup

    async def counted(name: str) -> bytes | None:
        asked.append(name)
        return await lookup(name)

    monkeypatch.setattr(mailboxes, "lookup", counted)
    return asked


async def test_replies_without_ack_ask_the_registry_once_per_reply_queue(
    broker, other, monkeypatch
) -> None:
    asked = _count_lookups(other, monkeypatch)
    requester, worker = await Raw.open(broker.port), await Raw.open(other.port)
    try:
        await worker.send(msg("cmd: consume", "mq: svc", "msgid: w", "window: -1"))
        for i in range(20):  # one call at a time, as an RPC client makes them
            await requester.send(msg("cmd: request", "mq: svc", f"msgid: r{i}", body=b"q"))
            call = await worker.recv()
            await worker.send(_reply(call, f"a{i}".encode()))
            assert (await requester.recv()).body == f"a{i}".encode()
        assert len(asked) == 1
        asked.clear()
        for i in range(3):  # with ack on, the answer is always the registry's
            await requester.send(msg("cmd: request", "mq: svc", f"msgid: k{i}", body=b"q"))
            call = await worker.recv()
            await worker.send(_reply(call, b"acked", ack=True))
            assert (await worker.recv()).status == 200
            assert (await requester.recv()).body == b"acked"
        assert len(asked) == 3
    finally:
        await requester.close()
        await worker.close()


async def _box_on(b: Broker_, token: str) -> Raw:
    """An owner connection on ``b`` holding Temp MQ ``box`` (with ``token``), consuming."""
    owner = await Raw.open(b.port)
    await create_temp_mq(owner, "box", token)
    await owner.send(msg("cmd: consume", "mq: box", "msgid: c", "token: " + token))
    return owner


def _to_box(msgid: str, body: bytes, token: str = "tk") -> bytes:
    return msg("cmd: produce", "mq: box", f"msgid: {msgid}", "ack: 0", f"token: {token}", body=body)


@pytest.mark.parametrize("token", ["tk", "nope"])
async def test_a_reply_follows_its_queue_made_again_only_with_the_same_token(
    broker, other, third, caplog, token
) -> None:
    """The producer's broker remembers ``box`` on the first owner's broker; the owner
    reconnects to a third broker and makes ``box`` again: the first broker passes the
    message on when the new ``box`` has the token the producer's broker checked, and
    drops it with a log line when not."""
    producer = await Raw.open(other.port)
    first = await _box_on(broker, "tk")
    try:
        await producer.send(_to_box("m1", b"one"))
        assert (await first.recv()).body == b"one"
        await first.close()
        assert await _gone(broker, "box")
        again = await _box_on(third, token)
        with caplog.at_level(logging.INFO, logger="mqcloud.zbus"):
            await producer.send(_to_box("m2", b"two"))
            if token == "tk":
                assert (await again.recv()).body == b"two"
            else:
                assert await again.silent(0.3)
        assert any("box is gone" in r.getMessage() for r in caplog.records) is (token != "tk")
        await again.close()
    finally:
        await producer.close()
        await first.close()


async def test_a_reply_to_an_owner_no_one_hears_asks_the_registry_again(
    broker, other, redis_url
) -> None:
    """The broker remembered as the owner stopped; the owner made ``box`` again on
    another broker: the producer's broker finds it there."""
    producer = await Raw.open(other.port)
    try:
        async with running_broker(redis_url) as gone:  # stopped on leaving the block
            first = await _box_on(gone, "tk")
            await producer.send(_to_box("m1", b"one"))
            assert (await first.recv()).body == b"one"
            await first.close()
        again = await _box_on(broker, "tk")
        await producer.send(_to_box("m2", b"two"))
        assert (await again.recv()).body == b"two"
        await again.close()
    finally:
        await producer.close()


def test_a_forward_of_the_first_version_still_reads() -> None:
    """A broker of the previous version wrote four fields: during a rolling upgrade its
    forwards still reach their Temp MQ (with no token checked: never passed on to one
    that has a token)."""
    old = msgspec.msgpack.encode(("box", 200, {"msgid": "m"}, b"hi"))
    forward, message = decode_forward(old)
    assert (forward.name, forward.token_hash, forward.hops) == ("box", "", 0)
    assert (message.status, message.msgid, message.body) == (200, "m", b"hi")
    remote = RemoteTemp("box", "owner", 5, "h")
    again, _ = decode_forward(encode_forward(remote, message, hops=1))
    assert (again.name, again.token_hash, again.hops, again.headers) == (
        "box", "h", 1, {"msgid": "m"},
    )  # fmt: skip
    with pytest.raises(msgspec.DecodeError):
        decode_forward(msgspec.msgpack.encode(("box", "x")))
