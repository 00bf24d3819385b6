"""Who may do what over zbus, through raw HTTP-shaped messages on a real socket (zbus.md §8,
§9, §12, §13.3a).

The topic is a console topic: closed to token-less clients (its team's anonymous app has no
policies on it). The ``token`` header carries an mqcloud app token; refusals are 403 with
the §12 body, and nothing is stored or delivered — the queue's counts do not move and the
refused connection receives nothing, while the rightful consumer still gets the message.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

import pytest

from brokers.protocols.zbus import Message
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
)
from tests.zbus.conftest import Broker_, Raw, msg, running_broker

pytestmark = pytest.mark.django_db(transaction=True)

RATE_LIMITED = re.compile(
    rb"MQ\((?P<mq>[^)]+)\) forbbiden, rate limit exceeded, retry after \d+ ms"
)


@pytest.fixture
async def broker(catalog: Catalog, redis_url: str) -> AsyncIterator[Broker_]:
    async with running_broker(redis_url) as b:
        yield b


@pytest.fixture
def seen(broker: Broker_) -> Seen:
    return seen_by(broker.watcher)


@pytest.fixture
async def conn(broker: Broker_) -> AsyncIterator:
    """``await conn()`` opens a raw connection (closed after the test)."""
    opened: list[Raw] = []

    async def open_conn() -> Raw:
        raw = await Raw.open(broker.port)
        opened.append(raw)
        return raw

    yield open_conn
    for raw in opened:
        await raw.close()


def forbidden(mq: str, token: str | None) -> bytes:
    """The §12 body of a 403 on produce, consume or request."""
    return f"MQ({mq}) forbbiden, token({'null' if token is None else token}) mismatched".encode()


def token_lines(token: str | None) -> tuple[str, ...]:
    return () if token is None else (f"token: {token}",)


async def produce(raw: Raw, mq: str, msgid: str, body: bytes, token: str | None) -> Message:
    await raw.send(
        msg("cmd: produce", f"mq: {mq}", f"msgid: {msgid}", *token_lines(token), body=body)
    )
    return await raw.recv()


async def consume(raw: Raw, mq: str, msgid: str, token: str | None, window: int = 1) -> None:
    await raw.send(
        msg(
            "cmd: consume", f"mq: {mq}", f"msgid: {msgid}", f"window: {window}", *token_lines(token)
        )
    )


async def owner_consumes(raw: Raw, catalog: Catalog, *bodies: bytes) -> None:
    """A consume of the owner receives exactly ``bodies``, then nothing more."""
    await consume(raw, catalog.topic, "own", catalog.owner_token, window=len(bodies) + 1)
    got = [await raw.recv() for _ in bodies]
    assert [(m.status, m.msgid, m.body) for m in got] == [(200, "own", b) for b in bodies]
    assert await raw.silent(0.2)


# ---------------------------------------------------------------------- 1, 2, 3: refused apps


@pytest.mark.parametrize("who", ["no token", "wrong token", "another team's app"])
async def test_no_valid_policy_is_403_and_nothing_is_stored_or_delivered(
    who: str, catalog: Catalog, conn, store: Store
):
    token = {
        "no token": None,
        "wrong token": WRONG_TOKEN,
        "another team's app": catalog.stranger_token,
    }[who]
    owner = await conn()
    assert (await produce(owner, catalog.topic, "seed", b"seed", catalog.owner_token)).status == 200
    before = await store.state(catalog.topic)
    assert before.queue[0] == 1

    intruder = await conn()
    reply = await produce(intruder, catalog.topic, "p1", b"intruder", token)
    assert (reply.status, reply.msgid, reply.body) == (403, "p1", forbidden(catalog.topic, token))
    await intruder.send(
        msg("cmd: request", f"mq: {catalog.topic}", "msgid: r1", *token_lines(token), body=b"rpc")
    )
    reply = await intruder.recv()
    assert (reply.status, reply.msgid, reply.body) == (403, "r1", forbidden(catalog.topic, token))
    await consume(intruder, catalog.topic, "c1", token)
    reply = await intruder.recv()
    assert (reply.status, reply.msgid, reply.body) == (403, "c1", forbidden(catalog.topic, token))
    # ack off: no reply at all (§8), and still nothing stored
    await intruder.send(
        msg("cmd: produce", f"mq: {catalog.topic}", "ack: 0", *token_lines(token), body=b"quiet")
    )
    assert await intruder.silent(0.3)  # the seed is ready: a registered consume would get it
    assert await store.state(catalog.topic) == before

    await owner_consumes(owner, catalog, b"seed")
    assert await intruder.silent(0.1)


# ---------------------------------------------------------------------- 4: the owner


async def test_owner_produces_and_consumes_its_message_back(catalog: Catalog, conn, store: Store):
    owner = await conn()
    body = bytes(range(256)) + "ünïcødé\r\n\r\n".encode()
    ack = await produce(owner, catalog.topic, "p1", body, catalog.owner_token)
    assert (ack.status, ack.msgid) == (200, "p1") and int(ack.body) > 0
    assert (await store.state(catalog.topic)).queue[0] == 1
    consumer = await conn()
    await consume(consumer, catalog.topic, "c1", catalog.owner_token)
    got = await consumer.recv()
    assert (got.status, got.msgid, got.msgid_raw, got.body) == (200, "c1", "p1", body)
    assert "token" not in got.headers  # the app token is not handed on (§5)


@pytest.mark.parametrize("window", [1, -1], ids=["parked", "streaming"])
async def test_a_rotated_token_ends_the_consumes_that_acted_on_it(
    catalog: Catalog, conn, store: Store, seen: Seen, window: int
):
    """A consume parked or streaming with the app's old token would deliver until the
    connection closed: rotating the token ends the connection, and a consume with it is
    then 403 (brokers.engine.credentials)."""
    consumer = await conn()
    await consume(consumer, catalog.topic, "c1", catalog.owner_token, window=window)
    assert await consumer.silent(0.3)
    old_token = catalog.owner_token
    await rotate_owner_token(catalog, seen)
    assert await consumer.closed_by_peer()
    owner = await conn()
    ack = await produce(owner, catalog.topic, "p1", b"after", catalog.owner_token)
    assert ack.status == 200
    late = await conn()
    await consume(late, catalog.topic, "c2", old_token)
    refused = await late.recv()
    assert (refused.status, refused.body) == (403, forbidden(catalog.topic, old_token))
    await owner_consumes(owner, catalog, b"after")


# ---------------------------------------------------------------------- 5: paused


async def test_paused_consumer_waits_and_gets_the_message_once_resumed(
    catalog: Catalog, conn, store: Store, seen: Seen
):
    await change(catalog, seen, consumer={"paused": True})
    owner = await conn()
    ack = await produce(owner, catalog.topic, "p1", b"while paused", catalog.owner_token)
    assert ack.status == 200  # producing is not paused
    before = await store.state(catalog.topic)
    assert before.queue[:2] == (1, 0)

    consumer = await conn()
    await consume(consumer, catalog.topic, "c1", catalog.owner_token)
    assert await consumer.silent(0.5)  # parked: no reply, no delivery
    assert await store.state(catalog.topic) == before  # nothing leased

    await change(catalog, seen, consumer={"paused": False})
    got = await consumer.recv(wait=5)
    assert (got.status, got.msgid, got.msgid_raw, got.body) == (200, "c1", "p1", b"while paused")


# ---------------------------------------------------------------------- 6: blacklisted address


async def test_blacklisted_client_may_neither_produce_nor_consume(
    catalog: Catalog, conn, store: Store, seen: Seen
):
    owner = await conn()
    assert (await produce(owner, catalog.topic, "seed", b"seed", catalog.owner_token)).status == 200
    await change(
        catalog,
        seen,
        producer={"blacklist": [LOOPBACK_HOST]},
        consumer={"blacklist": [LOOPBACK_NET]},
    )
    before = await store.state(catalog.topic)

    reply = await produce(owner, catalog.topic, "p1", b"blacklisted", catalog.owner_token)
    assert (reply.status, reply.body) == (403, forbidden(catalog.topic, catalog.owner_token))
    await consume(owner, catalog.topic, "c1", catalog.owner_token)
    reply = await owner.recv()
    assert (reply.status, reply.msgid, reply.body) == (
        403,
        "c1",
        forbidden(catalog.topic, catalog.owner_token),
    )
    assert await owner.silent(0.3)
    assert await store.state(catalog.topic) == before

    await change(catalog, seen, producer={"blacklist": []}, consumer={"blacklist": []})
    await owner_consumes(owner, catalog, b"seed")  # and not the refused one


# ---------------------------------------------------------------------- 7: rate limit


@LIMITS
async def test_rate_limited_producer_gets_403_and_only_acknowledged_messages_are_stored(
    catalog: Catalog, conn, store: Store, seen: Seen, limit: dict
):
    await change(catalog, seen, **limit)
    owner = await conn()
    bodies = {f"p{i}": f"burst-{i}".encode() for i in range(8)}
    await owner.send(
        b"".join(
            msg(
                "cmd: produce",
                f"mq: {catalog.topic}",
                f"msgid: {mid}",
                f"token: {catalog.owner_token}",
                body=body,
            )
            for mid, body in bodies.items()
        )
    )
    replies = {}
    for _ in bodies:
        reply = await owner.recv()
        replies[reply.msgid] = reply
    assert set(replies) == set(bodies)
    accepted = [body for mid, body in bodies.items() if replies[mid].status == 200]
    limited = [r for r in replies.values() if r.status != 200]
    assert accepted and limited, {mid: r.status for mid, r in replies.items()}
    for reply in limited:
        assert reply.status == 403
        match = RATE_LIMITED.fullmatch(reply.body)
        assert match and match["mq"] == catalog.topic.encode(), reply.body
    assert (await store.state(catalog.topic)).queue[0] == len(accepted)
    await owner_consumes(owner, catalog, *accepted)  # in the order they were sent


# ---------------------------------------------------------------------- open vs closed topics


async def test_only_an_opened_topic_accepts_token_less_clients(
    catalog: Catalog, conn, store: Store
):
    raw = await conn()
    ack = await produce(raw, catalog.open_topic, "p1", b"anonymous", None)
    assert (ack.status, ack.msgid) == (200, "p1")
    await consume(raw, catalog.open_topic, "c1", None)
    got = await raw.recv()
    assert (got.status, got.msgid, got.msgid_raw, got.body) == (200, "c1", "p1", b"anonymous")

    before = await store.state(catalog.topic)
    closed = await produce(raw, catalog.topic, "p2", b"anonymous", None)
    assert (closed.status, closed.body) == (403, forbidden(catalog.topic, None))
    await consume(raw, catalog.topic, "c2", None)
    closed = await raw.recv()
    assert (closed.status, closed.msgid, closed.body) == (403, "c2", forbidden(catalog.topic, None))
    assert await store.state(catalog.topic) == before
