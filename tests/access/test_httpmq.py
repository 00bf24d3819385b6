"""Who may do what over HTTP-MQ, against a live service (runproxy) (http-mq.md §1, §3, §11, §13.1).

No or an unknown token is 401, another app's token 403, a blacklisted client 403, a producer
over its rate limit 429 with ``Retry-After``; a paused consumer gets 200 with
``result.status`` PAUSED. Every refusal is also checked in the store: nothing stored,
nothing locked or acknowledged, and the rightful consumer still gets the message.
"""

from __future__ import annotations

import json

import httpx
import pytest

from tests.access.conftest import (
    LIMITS,
    LOOPBACK_HOST,
    LOOPBACK_NET,
    WRONG_TOKEN,
    Catalog,
    Seen,
    Store,
    change,
)

pytestmark = pytest.mark.django_db(transaction=True)


def auth(token: str | None) -> dict[str, str]:
    return {} if token is None else {"Authorization": f"Bearer {token}"}


async def produce(
    mq: httpx.AsyncClient, catalog: Catalog, text: str, bearer: str | None, **extra: str
) -> httpx.Response:
    return await mq.post(
        "/mq/produce",
        data={"producer": catalog.producer, "message": text, **extra},
        headers=auth(bearer),
    )


async def produce_batch(
    mq: httpx.AsyncClient, catalog: Catalog, texts: list[str], bearer: str | None, **extra: str
) -> httpx.Response:
    return await mq.post(
        "/mq/produce/batch",
        data={"producer": catalog.producer, "messages": json.dumps(texts), **extra},
        headers=auth(bearer),
    )


async def fetch(
    mq: httpx.AsyncClient, catalog: Catalog, bearer: str | None, **extra: str
) -> httpx.Response:
    return await mq.get(
        "/mq/message",
        params={"topic": catalog.topic, "consumer": catalog.consumer, **extra},
        headers=auth(bearer),
    )


def refused(response: httpx.Response, status: int, error: str) -> None:
    """An error envelope with a matching HTTP status and no result (nothing was done)."""
    body = response.json()
    assert (response.status_code, body["status"], body.get("error")) == (status, status, error), (
        body
    )
    assert "result" not in body


async def owner_consumes(mq: httpx.AsyncClient, catalog: Catalog, *texts: str) -> None:
    """The owner fetches exactly ``texts`` in one batch and acknowledges it."""
    r = await fetch(mq, catalog, catalog.owner_token)
    result = r.json()["result"]
    assert (r.status_code, result["status"]) == (200, "FOUND"), result
    assert [m["message"] for m in result["msgList"]] == list(texts)
    ack = await mq.post(
        "/mq/ack",
        data={
            "topic": catalog.topic,
            "consumer": catalog.consumer,
            "requestId": result["requestId"],
        },
        headers=auth(catalog.owner_token),
    )
    assert ack.status_code == 200 and ack.json()["message"].startswith("ok "), ack.json()


async def snapshot(store: Store, catalog: Catalog):
    return await store.state(catalog.topic), await store.progress(catalog.topic, catalog.owner)


# ---------------------------------------------------------------------- 1, 2, 3: refused tokens


@pytest.mark.parametrize(
    "who", ["no token", "wrong token", "another team's app"], ids=["no", "wrong", "other"]
)
async def test_refused_token_produces_consumes_and_acks_nothing(
    who: str, mq: httpx.AsyncClient, mq_seen: Seen, catalog: Catalog, store: Store
):
    token, status, error = {
        "no token": (None, 401, "UNAUTHENTICATED"),
        "wrong token": (WRONG_TOKEN, 401, "UNAUTHENTICATED"),
        "another team's app": (catalog.stranger_token, 403, "FORBIDDEN"),
    }[who]
    assert (await produce(mq, catalog, "seed", catalog.owner_token)).status_code == 200
    before = await snapshot(store, catalog)

    refused(await produce(mq, catalog, "intruder", token), status, error)
    refused(await produce(mq, catalog, "as a parameter", None, token=token or ""), status, error)
    refused(await produce_batch(mq, catalog, ["a", "b"], token), status, error)
    refused(await fetch(mq, catalog, token), status, error)
    assert await snapshot(store, catalog) == before

    # the owner's batch, locked under its requestId: nobody else may ack or unlock it
    r = await fetch(mq, catalog, catalog.owner_token)
    result = r.json()["result"]
    assert [m["message"] for m in result["msgList"]] == ["seed"]
    locked = await snapshot(store, catalog)
    assert locked[1][0][1]  # the owner holds the partition's lock
    params = {
        "topic": catalog.topic,
        "consumer": catalog.consumer,
        "requestId": result["requestId"],
    }
    for path in ("/mq/ack", "/mq/unlock", "/mq/message"):
        refused(await mq.post(path, data=params, headers=auth(token)), status, error)
    assert await snapshot(store, catalog) == locked

    ack = await mq.post("/mq/ack", data=params, headers=auth(catalog.owner_token))
    assert ack.status_code == 200 and ack.json()["message"].startswith("ok "), ack.json()
    assert await store.progress(catalog.topic, catalog.owner) == ((1, "", 0),)


# ---------------------------------------------------------------------- 4: the owner


async def test_owner_produces_and_consumes_its_message_back(
    mq: httpx.AsyncClient, mq_seen: Seen, catalog: Catalog, store: Store
):
    text = 'ünïcødé ✓ & = ?\n{"json": true}'
    r = await produce(mq, catalog, text, catalog.owner_token)
    assert r.status_code == 200 and r.json()["result"]["sendStatus"] == "SEND_OK"
    assert await store.bodies(catalog.topic) == [text.encode()]
    await owner_consumes(mq, catalog, text)
    assert await store.progress(catalog.topic, catalog.owner) == ((1, "", 0),)


# ---------------------------------------------------------------------- 5: paused


async def test_paused_consumer_gets_paused_until_resumed(
    mq: httpx.AsyncClient, mq_seen: Seen, catalog: Catalog, store: Store
):
    await change(catalog, mq_seen, consumer={"paused": True})
    r = await produce(mq, catalog, "while paused", catalog.owner_token)
    assert r.status_code == 200  # producing is not paused
    before = await snapshot(store, catalog)

    r = await fetch(mq, catalog, catalog.owner_token)
    body = r.json()
    assert (r.status_code, body["status"], body["result"]["status"]) == (200, 200, "PAUSED")
    assert body["result"]["msgListSize"] == 0 and "msgList" not in body["result"]
    assert "requestId" not in body["result"]  # nothing locked
    assert await snapshot(store, catalog) == before

    await change(catalog, mq_seen, consumer={"paused": False})
    await owner_consumes(mq, catalog, "while paused")


# ---------------------------------------------------------------------- 6: blacklisted address


async def test_blacklisted_client_may_neither_produce_nor_consume(
    mq: httpx.AsyncClient, mq_seen: Seen, catalog: Catalog, store: Store
):
    assert (await produce(mq, catalog, "seed", catalog.owner_token)).status_code == 200
    await change(
        catalog,
        mq_seen,
        producer={"blacklist": [LOOPBACK_HOST]},
        consumer={"blacklist": [LOOPBACK_NET]},
    )
    before = await snapshot(store, catalog)

    refused(await produce(mq, catalog, "blacklisted", catalog.owner_token), 403, "FORBIDDEN")
    delayed = await produce(mq, catalog, "later", catalog.owner_token, delayLevel="1")
    refused(delayed, 403, "FORBIDDEN")
    refused(await fetch(mq, catalog, catalog.owner_token), 403, "FORBIDDEN")
    assert await snapshot(store, catalog) == before

    await change(catalog, mq_seen, producer={"blacklist": []}, consumer={"blacklist": []})
    await owner_consumes(mq, catalog, "seed")  # and not the refused one


async def test_blacklisted_batch_is_refused_as_a_whole(
    mq: httpx.AsyncClient, mq_seen: Seen, catalog: Catalog, store: Store
):
    """§2.2: a request-level failure (auth) has no ``result`` and means nothing was sent."""
    await change(catalog, mq_seen, producer={"blacklist": [LOOPBACK_HOST]})
    before = await snapshot(store, catalog)
    response = await produce_batch(mq, catalog, ["a", "b"], catalog.owner_token)
    assert await snapshot(store, catalog) == before
    refused(response, 403, "FORBIDDEN")


async def test_blacklisted_client_cannot_claim_another_address(
    mq: httpx.AsyncClient, mq_seen: Seen, catalog: Catalog, store: Store
):
    """``clientIp`` is only recorded as the queue's last client (§3.1); the blacklist judges
    the connection's own address (forwarding headers count only from trusted proxies)."""
    assert (await produce(mq, catalog, "seed", catalog.owner_token)).status_code == 200
    await change(
        catalog,
        mq_seen,
        producer={"blacklist": [LOOPBACK_HOST]},
        consumer={"blacklist": [LOOPBACK_NET]},
    )
    before = await snapshot(store, catalog)
    spoofed = {"clientIp": "203.0.113.9"}
    forwarded = {"X-Forwarded-For": "203.0.113.9", "X-Real-IP": "203.0.113.9"}
    refused(await produce(mq, catalog, "spoofed", catalog.owner_token, **spoofed), 403, "FORBIDDEN")
    r = await mq.post(
        "/mq/produce",
        data={"producer": catalog.producer, "message": "forwarded"},
        headers={**auth(catalog.owner_token), **forwarded},
    )
    refused(r, 403, "FORBIDDEN")
    refused(await fetch(mq, catalog, catalog.owner_token, **spoofed), 403, "FORBIDDEN")
    r = await mq.get(
        "/mq/message",
        params={"topic": catalog.topic, "consumer": catalog.consumer},
        headers={**auth(catalog.owner_token), **forwarded},
    )
    refused(r, 403, "FORBIDDEN")
    assert await snapshot(store, catalog) == before


# ---------------------------------------------------------------------- 7: rate limit


@LIMITS
async def test_rate_limited_producer_gets_429_and_only_acknowledged_messages_are_stored(
    mq: httpx.AsyncClient, mq_seen: Seen, catalog: Catalog, store: Store, limit: dict
):
    await change(catalog, mq_seen, **limit)
    texts = [f"burst-{i}" for i in range(8)]
    responses = [await produce(mq, catalog, text, catalog.owner_token) for text in texts]
    codes = [r.status_code for r in responses]
    assert set(codes) <= {200, 429} and 200 in codes and 429 in codes, codes
    for r in responses:
        if r.status_code == 429:
            refused(r, 429, "RATE_LIMITED")
            assert int(r.headers["Retry-After"]) >= 1
    accepted = [t for t, r in zip(texts, responses, strict=True) if r.status_code == 200]
    assert await store.bodies(catalog.topic) == [t.encode() for t in accepted]
    await owner_consumes(mq, catalog, *accepted)


async def test_rate_limit_covers_delayed_messages(
    mq: httpx.AsyncClient, mq_seen: Seen, catalog: Catalog, store: Store
):
    """A delayed message is admitted when it is accepted (one permit of 1/s: the second
    one, a few milliseconds later, is over the limit) and stored only if acknowledged."""
    await change(catalog, mq_seen, producer={"rate_limit": 1})
    first = await produce(mq, catalog, "later-1", catalog.owner_token, delayLevel="18")
    second = await produce(mq, catalog, "later-2", catalog.owner_token, delayLevel="18")
    assert first.status_code == 200, first.json()
    refused(second, 429, "RATE_LIMITED")
    state = await store.state(catalog.topic)
    assert (state.delayed, state.log_count) == (1, 0)
