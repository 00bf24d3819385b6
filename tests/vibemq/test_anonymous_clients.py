"""A token-less VibeMQ client (anonymous access allowed) is listed like any other: under
the anonymous app it acts as on each queue, with its transport's protocol and the
version it stated at connect — it was listed with no protocol at all — and no longer
counted as connected once it closed."""

from __future__ import annotations

import dataclasses

import pytest

from brokers.clients.vibemq.client import CLIENT_VERSION
from tests.access.conftest import until
from tests.vibemq.conftest import FAST, Broker

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
async def open_broker(catalog, redis_url: str):
    b = Broker(1, redis_url)
    await b.start(config=dataclasses.replace(FAST, auth_required=False))
    try:
        yield b
    finally:
        await b.stop()


async def test_an_anonymous_client_is_listed_under_the_app_it_acts_as(open_broker, clients):
    anon = await clients(token=None, port=open_broker.port)
    await anon.publish("anon-listed", {"n": 1})
    app = open_broker.engine.topic("anon-listed").anonymous_app
    assert app

    async def row():
        rows = (await open_broker.engine.clients_of([app]))[app]
        return next((r for r in rows if r.protocol == "vibemq"), None)

    async def listed() -> bool:
        await open_broker.engine.clients.flush()
        r = await row()
        return r is not None and r.connections == 1

    await until(listed, within=10, what="the anonymous client listed as connected")
    r = await row()
    assert r.version == CLIENT_VERSION
    assert [(t, role) for t, role, _ in r.topics] == [("anon-listed", "produce")]
    await anon.close()

    async def gone() -> bool:
        await open_broker.engine.clients.flush()
        r = await row()
        return r is not None and r.connections == 0

    await until(gone, within=10, what="its connection withdrawn")
