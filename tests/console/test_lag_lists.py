"""Lag in the consumer list equals the consumer page's and the API's; the list sorts by
lag, pages, refreshes by htmx; the topic list shows produce rates."""

from __future__ import annotations

import asyncio
import time

import pytest
import redis.asyncio as aioredis
from django.conf import settings
from rest_framework.test import APIClient

from brokers.catalog_loader import build_snapshot, publish
from brokers.engine import Engine, Message
from brokers.models import ConsumerPolicy
from tests import factories
from tests.engine_calls import engine_call

pytestmark = pytest.mark.django_db


def produce_and_consume(world) -> None:
    async def run(engine):
        await engine.append("orders", "shop", [Message(b"a")] * 7, partition=0)
        await engine.append("orders", "shop", [Message(b"b")] * 4, partition=1)
        got = await engine.fetch("orders", "shop", count=3, owner="c", address="10.0.0.9:1")
        await engine.ack("orders", "shop", got.partition, [d.index for d in got.messages])

    engine_call(run)


def test_list_lag_equals_consumer_page_and_api(client, world):
    produce_and_consume(world)
    client.force_login(world.alice)
    listed = client.get("/consumers/")
    row = next(r for r in listed.context["rows"] if r.consumer.name == "shop.orders")
    page_lag = client.get("/consumers/shop.orders/").context["total_lag"]
    api = APIClient()
    api.force_authenticate(world.alice)
    api_list = api.get("/api/v1/consumers/").json()["results"]
    api_one = api.get("/api/v1/consumers/shop.orders/").json()
    assert row.lag == page_lag == api_list[0]["lag"] == api_one["lag"] == 8
    assert row.oldest_unacked_age_ms is not None and api_one["oldest_unacked_age_ms"] >= 0
    assert api_one["state"] == "running" and api_one["lagging_partitions"] == 2
    text = listed.content.decode()
    assert 'data-lag="8"' in text and "badge-running" in text


def test_list_is_scoped_sorted_by_lag_and_refreshed(client, world):
    busy = ConsumerPolicy.objects.create(
        topic=world.topic, app=factories.app("bulk", world.red)[0], paused=True
    )
    publish()
    engine_call(lambda e: e.append("orders", "shop", [Message(b"x")] * 3, partition=0))
    client.force_login(world.alice)
    by_name = [r.consumer.name for r in client.get("/consumers/").context["rows"]]
    assert by_name == ["bulk.orders", "shop.orders"]  # never the blue team's
    by_lag = client.get("/consumers/?sort=-lag")
    rows = by_lag.context["rows"]
    assert [r.lag for r in rows] == sorted([r.lag for r in rows], reverse=True)
    assert "badge-paused" in by_lag.content.decode() and busy.name in by_lag.content.decode()
    partial = client.get("/consumers/?sort=-lag", HTTP_HX_REQUEST="true").content.decode()
    assert "<html" not in partial and 'hx-trigger="every 2s"' in partial
    assert "sort=-lag" in partial
    api = APIClient()
    api.force_authenticate(world.alice)
    ordered = api.get("/api/v1/consumers/?ordering=-lag").json()["results"]
    assert [c["lag"] for c in ordered] == sorted([c["lag"] for c in ordered], reverse=True)
    assert api.get("/api/v1/consumers/?ordering=size").status_code == 400
    assert api.get("/api/v1/consumers/?limit=0").status_code == 400


def test_list_pages(client, world):
    for i in range(55):
        ConsumerPolicy.objects.create(
            topic=world.topic, app=factories.app(f"a{i:02d}", world.red)[0]
        )
    client.force_login(world.alice)
    first = client.get("/consumers/")
    assert len(first.context["rows"]) == 50 and "Next →" in first.content.decode()
    second = client.get("/consumers/?page=2")
    assert len(second.context["rows"]) == 6


def test_topic_list_shows_produce_rate(client, world):
    snapshot = build_snapshot()

    async def produce_a_minute_ago():
        redis = aioredis.from_url(settings.REDIS_URL)
        engine = Engine(redis, lambda: snapshot, clock=lambda: time.time() - 60)
        await engine.append("orders", "shop", [Message(b"m")] * 150, partition=0)
        await engine.close()
        await redis.aclose()

    asyncio.run(produce_a_minute_ago())
    client.force_login(world.alice)
    response = client.get("/topics/")
    row = next(r for r in response.context["rows"] if r.topic.code == "orders")
    assert row.produced == 150 and row.per_second == pytest.approx(0.5)
    assert "0.50/s" in response.content.decode()
    api = APIClient()
    api.force_authenticate(world.alice)
    listed = api.get("/api/v1/topics/").json()["results"]
    assert listed[0]["produce_rate_per_s"] == pytest.approx(0.5)
    assert api.get("/api/v1/topics/orders/").json()["produce_rate_per_s"] == pytest.approx(0.5)
