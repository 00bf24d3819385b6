"""The message browser and the API show every property of every protocol, the producing
protocol and the client address."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from brokers.engine import Message
from brokers.protocols.vibemq import Publish
from brokers.protocols.zbus import Message as ZbusMessage
from brokers.protocols.zbus import RequestLine
from brokers.servers.vibemq.messages import to_message
from brokers.servers.zbus.stored import to_engine
from mqcloud.console import engine_calls
from proxy.httpmq.messages import HTTPMQ_EXTENSION
from tests.engine_calls import engine_call

pytestmark = pytest.mark.django_db


def produce_one_of_each() -> None:
    zbus = to_engine(
        ZbusMessage(start=RequestLine(), headers={"topic": "orders", "x-trace": "z-1"}, body=b"zb")
    )
    vibemq = to_message(Publish(id="v-1", queue="orders", payload={"n": 1}, headers={"h": "v"}))
    httpmq = Message(
        b"hm", business_id="k-1", attributes={"KEYS": "k-1"}, extension=HTTPMQ_EXTENSION
    )
    jmq4 = Message(b"jm", business_id="b-1", attributes={"color": "red"})

    async def run(engine):
        for i, message in enumerate([zbus, vibemq, httpmq, jmq4]):
            await engine.append(
                "orders",
                "shop",
                [message],
                partition=0,
                client_address=f"10.0.0.{i + 1}:{4000 + i}",
            )

    engine_call(run)


def test_browser_shows_protocol_properties_and_client(client, world):
    produce_one_of_each()
    client.force_login(world.alice)
    response = client.get(
        "/topics/orders/messages/", {"mode": "index", "partition": 0, "count": 10}
    )
    rows = response.context["rows"]
    assert [r.protocol for r in rows] == ["zbus", "VibeMQ", "HTTP-MQ", "JMQ4"]
    assert rows[0].properties["x-trace"] == "z-1" and rows[0].properties["topic"] == "orders"
    assert rows[1].properties["h"] == "v" and rows[1].properties["messageId"] == "v-1"
    assert rows[2].properties == {"KEYS": "k-1"}
    assert rows[3].properties == {"color": "red"}
    assert [r.client_address for r in rows] == [f"10.0.0.{i}:{3999 + i}" for i in range(1, 5)]
    text = response.content.decode()
    assert "<dt>x-trace</dt><dd>z-1</dd>" in text and "badge-protocol" in text


def test_api_lists_the_same_messages(world):
    produce_one_of_each()
    api = APIClient()
    api.force_authenticate(world.alice)
    response = api.get("/api/v1/topics/orders/messages/?partition=0&count=10")
    assert response.status_code == 200
    body = response.json()
    assert [m["protocol"] for m in body] == ["zbus", "VibeMQ", "HTTP-MQ", "JMQ4"]
    assert (
        body[0]["properties"]["x-trace"] == "z-1" and body[0]["client_address"] == "10.0.0.1:4000"
    )
    assert api.get("/api/v1/topics/orders/messages/?partition=9").status_code == 400
    assert api.get("/api/v1/topics/orders/messages/").status_code == 400
    assert api.get("/api/v1/topics/blue-secret/messages/?partition=0").status_code == 404


def test_api_start_past_the_end_lists_nothing(world, monkeypatch):
    """A start beyond a partition's end is an empty list (as the schema says), and a store
    that does not answer is 503, not a 400 on ``start``."""
    produce_one_of_each()
    api = APIClient()
    api.force_authenticate(world.alice)
    past = api.get("/api/v1/topics/orders/messages/?partition=0&start=99")
    assert past.status_code == 200 and past.json() == []
    assert api.get("/api/v1/topics/orders/messages/?partition=1&start=5").json() == []

    def down(*args: object) -> None:
        raise engine_calls.EngineUnavailable("The message store did not answer: refused")

    monkeypatch.setattr(engine_calls, "read_range", down)
    response = api.get("/api/v1/topics/orders/messages/?partition=0")
    assert response.status_code == 503 and response.json()["error"] == "engine_unavailable"


def test_api_searches_by_any_client_id_and_time_as_the_browser_does(world):
    """The API lists by partition and index only; the console also searched by the id a
    client saw and by time. /messages/search/ does what its search does."""
    produce_one_of_each()
    api = APIClient()
    api.force_authenticate(world.alice)
    search = "/api/v1/topics/orders/messages/search/"
    everything = api.get(search).json()  # the last hour
    assert [m["protocol"] for m in everything["results"]] == ["zbus", "VibeMQ", "HTTP-MQ", "JMQ4"]
    assert everything["truncated"] is False
    for given, protocol in (("v-1", "VibeMQ"), ("b-1", "JMQ4"), ("0:2", "HTTP-MQ")):
        found = api.get(search, {"id": given}).json()["results"]
        assert [m["protocol"] for m in found] == [protocol], given
    assert api.get(search, {"id": "nobody"}).json() == {"results": [], "truncated": False}
    assert api.get(search, {"until": 1000}).json()["results"] == []  # 1970: nothing then
    assert len(api.get(search, {"count": 2}).json()["results"]) == 2
    for bad in ({"since": 5, "until": 4}, {"partition": 9}, {"id": ""}, {"count": 0}, {"x": 1}):
        assert api.get(search, bad).status_code == 400, bad
    assert api.get("/api/v1/topics/blue-secret/messages/search/").status_code == 404


def test_a_time_search_reads_only_where_the_span_holds_messages(world, monkeypatch):
    """Where the span starts and ends in each partition comes from one round trip: a
    partition without messages then is not read at all (a topic of a thousand partitions
    costs no thousand reads), and the span's end is included to the millisecond."""
    produce_one_of_each()  # all in partition 0 of 2
    everything = engine_calls.scan("orders", [0, 1], 0, 2**62).rows
    assert len(everything) == 4
    from brokers.engine import Engine

    real, read = Engine.read, []

    async def counted(self, topic, partition, *args, **kwargs):
        read.append(partition)
        return await real(self, topic, partition, *args, **kwargs)

    monkeypatch.setattr(Engine, "read", counted)
    at = everything[-1].store_time_ms
    found = engine_calls.scan("orders", [0, 1], at, at).rows
    assert [r.index for r in found] == [r.index for r in everything if r.store_time_ms == at]
    assert read and set(read) == {0}
    read.clear()
    assert engine_calls.scan("orders", [0, 1], at + 1, at + 10).rows == []
    assert read == []
