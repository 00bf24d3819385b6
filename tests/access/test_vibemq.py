"""Who may do what over VibeMQ — the same JSON frames over TCP (an in-process broker) and
over WebSocket (``/ws/vibemq`` of a live daphne) (vibemq.md §5, §6, §7, §14, §16, §17).

Authentication is on (anonymous access is off by default): no token is ``AUTH_REQUIRED``,
a wrong one ``AUTH_FAILED``, and either leaves the session unauthenticated. An app without
a policy on the queue's topic, and a blacklisted client, get ``FORBIDDEN`` on publish and
on subscribe; a rate-limited producer gets ``RATE_LIMITED``. Nothing refused is stored or
delivered: the queue's counts do not move and the rightful subscriber still gets the
message.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pytest
import websockets

from tests.access.conftest import (
    LIMITS,
    LOOPBACK_HOST,
    LOOPBACK_NET,
    WRONG_TOKEN,
    Catalog,
    Seen,
    Store,
    change,
    rotate_owner_token,
    seen_by,
    seen_by_websocket,
    until,
)
from tests.vibemq.conftest import Broker, Raw

pytestmark = pytest.mark.django_db(transaction=True)


class Conn:
    """One VibeMQ connection, TCP or WebSocket: JSON objects in and out."""

    async def send(self, frame: dict[str, Any]) -> None:
        raise NotImplementedError

    async def recv(self, wait: float = 5.0) -> dict[str, Any]:
        raise NotImplementedError

    async def close(self) -> None:
        raise NotImplementedError

    async def call(self, frame: dict[str, Any]) -> dict[str, Any]:
        await self.send(frame)
        return await self.recv()

    async def silent(self, wait: float = 0.3) -> bool:
        """True if nothing arrives within ``wait`` seconds."""
        try:
            frame = await self.recv(wait)
        except TimeoutError:
            return True
        raise AssertionError(f"unexpected frame {frame}")


class TcpConn(Conn):
    def __init__(self, raw: Raw) -> None:
        self.raw = raw

    async def send(self, frame: dict[str, Any]) -> None:
        self.raw.send(frame)
        await self.raw.writer.drain()

    async def recv(self, wait: float = 5.0) -> dict[str, Any]:
        return await self.raw.recv(wait)

    async def close(self) -> None:
        await self.raw.close()


class WsConn(Conn):
    def __init__(self, ws) -> None:
        self.ws = ws

    async def send(self, frame: dict[str, Any]) -> None:
        await self.ws.send(json.dumps(frame))

    async def recv(self, wait: float = 5.0) -> dict[str, Any]:
        return json.loads(await asyncio.wait_for(self.ws.recv(), wait))

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await self.ws.close()


@dataclass
class Endpoint:
    """Where the test talks VibeMQ: ``open()`` a connection; ``seen`` waits for the catalog."""

    transport: str
    open: Callable[[], Awaitable[Conn]]
    seen: Seen


@pytest.fixture(params=["tcp", "websocket"])
async def vibemq(
    request: pytest.FixtureRequest, catalog: Catalog, redis_url: str
) -> AsyncIterator[Endpoint]:
    opened: list[Conn] = []
    broker: Broker | None = None
    if request.param == "tcp":
        broker = Broker(1, redis_url)
        await broker.start()
        port = broker.port

        async def open_conn() -> Conn:
            conn = TcpConn(await Raw.open(port))
            opened.append(conn)
            return conn

        seen = seen_by(broker.watcher)
    else:
        web_url = request.getfixturevalue("web_url")  # a session fixture: sync
        url = web_url.replace("http://", "ws://") + "/ws/vibemq"
        seen = seen_by_websocket(url)
        await seen(catalog.marker_token)  # the web process has this test's catalog

        async def open_conn() -> Conn:
            conn = WsConn(await websockets.connect(url, subprotocols=["vibemq"]))
            opened.append(conn)
            return conn

    try:
        yield Endpoint(request.param, open_conn, seen)
    finally:
        for conn in opened:
            await conn.close()
        if broker is not None:
            await broker.stop()


async def session(vibemq: Endpoint, token: str) -> Conn:
    """A connection authenticated with ``token``."""
    conn = await vibemq.open()
    reply = await conn.call({"id": "hello", "type": "connect", "headers": {"authToken": token}})
    assert reply["type"] == "connectAck", reply
    return conn


def publish(queue: str, msg_id: str, payload: Any, **headers: str) -> dict[str, Any]:
    frame: dict[str, Any] = {"id": msg_id, "type": "publish", "queue": queue, "payload": payload}
    if headers:
        frame["headers"] = headers
    return frame


def subscribe(queue: str, frame_id: str = "sub") -> dict[str, Any]:
    return {"id": frame_id, "type": "subscribe", "queue": queue}


def assert_error(reply: dict[str, Any], frame_id: str, code: str) -> None:
    assert (reply["type"], reply.get("id"), reply.get("errorCode")) == ("error", frame_id, code), (
        reply
    )


async def publish_ok(conn: Conn, queue: str, msg_id: str, payload: Any) -> None:
    ack = await conn.call(publish(queue, msg_id, payload))
    assert (ack["type"], ack["id"], ack["headers"]["messageId"]) == ("publishAck", msg_id, msg_id)


async def owner_receives(conn: Conn, queue: str, *expected: tuple[str, Any]) -> None:
    """``conn`` (the owner's) subscribes and gets exactly ``expected`` (id, payload), acking."""
    reply = await conn.call(subscribe(queue))
    assert reply["type"] == "subscribeAck", reply
    for msg_id, payload in expected:
        got = await conn.recv()
        assert (got["type"], got["id"], got["payload"]) == ("deliver", msg_id, payload), got
        await conn.send({"id": f"ack-{msg_id}", "type": "ack", "headers": {"messageId": msg_id}})
    assert await conn.silent(0.2)


async def closed(conn: Conn) -> bool:
    """True when the server ends the connection (within 5 s), without a frame first."""
    try:
        frame = await conn.recv(5.0)
    except TimeoutError:
        return False
    except (asyncio.IncompleteReadError, ConnectionError, websockets.ConnectionClosed):
        return True
    raise AssertionError(f"unexpected frame {frame}")


async def test_a_rotated_token_closes_the_connections_that_connected_with_it(
    vibemq: Endpoint, catalog: Catalog, store: Store
):
    """Rotating the app's token in the console ends the sessions authenticated with the old
    one — a subscriber too, which would otherwise get every new message; ``connect`` with
    it is then AUTH_FAILED (brokers.engine.credentials)."""
    subscriber = await session(vibemq, catalog.owner_token)
    assert (await subscriber.call(subscribe(catalog.topic)))["type"] == "subscribeAck"
    old_token = catalog.owner_token
    await rotate_owner_token(catalog, vibemq.seen)
    assert await closed(subscriber)
    again = await vibemq.open()
    reply = await again.call({"id": "h", "type": "connect", "headers": {"authToken": old_token}})
    assert_error(reply, "h", "AUTH_FAILED")
    fresh = await session(vibemq, catalog.owner_token)
    await publish_ok(fresh, catalog.topic, "m1", "after")
    await owner_receives(fresh, catalog.topic, ("m1", "after"))


# ---------------------------------------------------------------------- 1, 2: no or bad token


@pytest.mark.parametrize(
    ("token", "code"), [(None, "AUTH_REQUIRED"), (WRONG_TOKEN, "AUTH_FAILED")], ids=["no", "wrong"]
)
async def test_connect_without_a_valid_token_is_refused_and_nothing_passes(
    token: str | None, code: str, vibemq: Endpoint, catalog: Catalog, store: Store
):
    owner = await session(vibemq, catalog.owner_token)
    await publish_ok(owner, catalog.topic, "seed", "seed")
    before = await store.state(catalog.topic)

    conn = await vibemq.open()
    connect: dict[str, Any] = {"id": "c1", "type": "connect"}
    if token is not None:
        connect["headers"] = {"authToken": token}
    assert_error(await conn.call(connect), "c1", code)
    # the connection stays open but unauthenticated (§5, §4)
    assert_error(
        await conn.call(publish(catalog.topic, "p1", "intruder")), "p1", "NOT_AUTHENTICATED"
    )
    assert_error(await conn.call(subscribe(catalog.topic, "s1")), "s1", "NOT_AUTHENTICATED")
    assert await conn.silent(0.3)
    assert await store.state(catalog.topic) == before
    await owner_receives(owner, catalog.topic, ("seed", "seed"))


# ---------------------------------------------------------------------- 3: another team's app


async def test_another_teams_app_is_forbidden_to_publish_subscribe_or_purge(
    vibemq: Endpoint, catalog: Catalog, store: Store
):
    owner = await session(vibemq, catalog.owner_token)
    await publish_ok(owner, catalog.topic, "seed", "seed")
    before = await store.state(catalog.topic)

    stranger = await session(vibemq, catalog.stranger_token)
    assert_error(await stranger.call(publish(catalog.topic, "p1", "intruder")), "p1", "FORBIDDEN")
    assert_error(await stranger.call(subscribe(catalog.topic, "s1")), "s1", "FORBIDDEN")
    reply = await stranger.call({"id": "d1", "type": "deleteQueue", "queue": catalog.topic})
    assert_error(reply, "d1", "FORBIDDEN")
    assert await stranger.silent(0.3)  # the seed is queued: a subscription would get it
    assert await store.state(catalog.topic) == before
    # its own team's queue works (the refusals are about the policy, not the token)
    await publish_ok(stranger, catalog.their_topic, "own", {"mine": True})

    await owner_receives(owner, catalog.topic, ("seed", "seed"))


# ---------------------------------------------------------------------- 4: the owner


async def test_owner_publishes_and_consumes_its_message_back(
    vibemq: Endpoint, catalog: Catalog, store: Store
):
    producer = await session(vibemq, catalog.owner_token)
    payload = {"text": "ünïcødé ✓", "n": [1, 2.5, None, True], "nested": {"k": "v"}}
    ack = await producer.call(publish(catalog.topic, "m1", payload, correlationId="corr-1"))
    assert (ack["type"], ack["id"]) == ("publishAck", "m1"), ack
    assert (await store.state(catalog.topic)).queue[0] == 1
    consumer = await session(vibemq, catalog.owner_token)
    assert (await consumer.call(subscribe(catalog.topic)))["type"] == "subscribeAck"
    got = await consumer.recv()
    assert (got["type"], got["id"], got["queue"], got["payload"]) == (
        "deliver",
        "m1",
        catalog.topic,
        payload,
    )
    assert got["headers"]["correlationId"] == "corr-1"
    await consumer.send({"id": "a1", "type": "ack", "headers": {"messageId": "m1"}})
    await _until_queue(store, catalog.topic, (0, 0))


async def _until_queue(store: Store, topic: str, ready_in_flight: tuple[int, int]) -> None:
    async def reached() -> bool:
        return (await store.state(topic)).queue[:2] == ready_in_flight

    await until(reached, what=f"queue {topic} at (ready, in flight) = {ready_in_flight}")


# ---------------------------------------------------------------------- 5: paused


async def test_paused_consumer_gets_nothing_until_resumed(
    vibemq: Endpoint, catalog: Catalog, store: Store
):
    await change(catalog, vibemq.seen, consumer={"paused": True})
    producer = await session(vibemq, catalog.owner_token)
    await publish_ok(producer, catalog.topic, "m1", "while paused")  # producing is not paused
    before = await store.state(catalog.topic)
    assert before.queue[:2] == (1, 0)

    consumer = await session(vibemq, catalog.owner_token)
    assert (await consumer.call(subscribe(catalog.topic)))["type"] == "subscribeAck"
    assert await consumer.silent(0.5)
    assert await store.state(catalog.topic) == before  # nothing leased

    await change(catalog, vibemq.seen, consumer={"paused": False})
    got = await consumer.recv(wait=5)
    assert (got["type"], got["id"], got["payload"]) == ("deliver", "m1", "while paused"), got


# ---------------------------------------------------------------------- 6: blacklisted address


async def test_blacklisted_client_may_neither_publish_nor_subscribe(
    vibemq: Endpoint, catalog: Catalog, store: Store
):
    owner = await session(vibemq, catalog.owner_token)
    await publish_ok(owner, catalog.topic, "seed", "seed")
    await change(
        catalog,
        vibemq.seen,
        producer={"blacklist": [LOOPBACK_HOST]},
        consumer={"blacklist": [LOOPBACK_NET]},
    )
    before = await store.state(catalog.topic)

    assert_error(await owner.call(publish(catalog.topic, "p1", "blacklisted")), "p1", "FORBIDDEN")
    assert_error(await owner.call(subscribe(catalog.topic, "s1")), "s1", "FORBIDDEN")
    assert await owner.silent(0.3)
    assert await store.state(catalog.topic) == before

    await change(catalog, vibemq.seen, producer={"blacklist": []}, consumer={"blacklist": []})
    await owner_receives(owner, catalog.topic, ("seed", "seed"))  # and not the refused one


# ---------------------------------------------------------------------- 7: rate limit


@LIMITS
async def test_rate_limited_producer_gets_rate_limited_and_only_acked_messages_are_stored(
    vibemq: Endpoint, catalog: Catalog, store: Store, limit: dict
):
    await change(catalog, vibemq.seen, **limit)
    owner = await session(vibemq, catalog.owner_token)
    ids = [f"m{i}" for i in range(8)]
    for msg_id in ids:  # pipelined: all sent before any reply is read
        await owner.send(publish(catalog.topic, msg_id, f"burst-{msg_id}"))
    replies = [await owner.recv() for _ in ids]
    assert [r.get("id") for r in replies] == ids  # in order (§4)
    accepted = [r["id"] for r in replies if r["type"] == "publishAck"]
    limited = [r for r in replies if r["type"] != "publishAck"]
    assert accepted and limited, replies
    for reply in limited:
        assert_error(reply, reply["id"], "RATE_LIMITED")
    assert (await store.state(catalog.topic)).queue[0] == len(accepted)
    await owner_receives(owner, catalog.topic, *[(i, f"burst-{i}") for i in accepted])
