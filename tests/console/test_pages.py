"""Every console page renders for the owner and is refused to another team."""

from __future__ import annotations

import pytest

from brokers.engine import Message
from tests.engine_calls import engine_call

pytestmark = pytest.mark.django_db


def pages(w) -> list[str]:
    return [
        "/",
        "/topics/",
        f"/topics/{w.topic.code}/",
        f"/topics/{w.topic.code}/traffic.json",
        f"/topics/{w.topic.code}/messages/",
        f"/topics/{w.topic.code}/timers/",
        "/consumers/",
        f"/consumers/{w.consumer.name}/",
        f"/consumers/{w.consumer.name}/progress/",
        f"/consumers/{w.consumer.name}/lag.json",
        f"/consumers/{w.consumer.name}/retry/",
        f"/consumers/{w.consumer.name}/dlq/",
        "/clusters/",
        "/brokers/1/",
        "/apps/",
        f"/apps/{w.app.code}/",
        "/applications/",
        "/applications/new/",
        "/notifications/",
        "/audit/",
        "/alerts/",
    ]


def test_every_page_renders_for_a_member(client, world):
    client.force_login(world.alice)
    for url in pages(world):
        response = client.get(url)
        assert response.status_code == 200, (url, response.status_code)


def test_every_page_renders_for_an_admin(client, world):
    client.force_login(world.root)
    for url in [*pages(world), "/applications/queue/", f"/topics/{world.blue_topic.code}/"]:
        assert client.get(url).status_code == 200, url


def test_pages_need_login(client, world):
    for url in pages(world):
        response = client.get(url)
        assert response.status_code == 302 and response["Location"].startswith("/login/"), url


def test_another_team_gets_404(client, world):
    client.force_login(world.bob)
    w = world
    for url in [
        f"/topics/{w.topic.code}/",
        f"/topics/{w.topic.code}/traffic.json",
        f"/topics/{w.topic.code}/messages/",
        f"/topics/{w.topic.code}/timers/",
        f"/consumers/{w.consumer.name}/",
        f"/consumers/{w.consumer.name}/progress/",
        f"/consumers/{w.consumer.name}/lag.json",
        f"/consumers/{w.consumer.name}/dlq/",
        f"/apps/{w.app.code}/",
    ]:
        assert client.get(url).status_code == 404, url
    assert client.post(f"/apps/{w.app.code}/rotate/").status_code == 404
    assert (
        client.post(
            f"/consumers/{w.consumer.name}/dlq/action/", {"action": "dlq-purge"}
        ).status_code
        == 404
    )


def test_lists_show_own_team_only(client, world):
    client.force_login(world.alice)
    for url in ("/", "/topics/", "/consumers/", "/apps/", "/alerts/"):
        page = client.get(url).content.decode()
        assert "blue-secret" not in page and "blue-app" not in page, url
    assert "orders" in client.get("/topics/").content.decode()
    broker = client.get("/brokers/1/").content.decode()
    assert "blue-secret" not in broker and "other teams" in broker


def test_member_cannot_open_the_approval_queue(client, world):
    client.force_login(world.alice)
    assert client.get("/applications/queue/").status_code == 403


def test_topic_detail_shows_partitions_groups_and_consumers(client, world):
    engine_call(lambda e: e.append("orders", "shop", [Message(b"x")] * 3, partition=1))
    client.force_login(world.alice)
    page = client.get("/topics/orders/")
    text = page.content.decode()
    rows = page.context["partitions"]
    assert [(r["partition"], r["min"], r["max"]) for r in rows] == [(0, 0, 0), (1, 0, 3)]
    assert rows[1]["group"].leader_id == world.topic.groups.get().leader_id
    assert world.consumer.name in text and world.producer.name in text
    assert "chart.umd.min.js" in text and "cdn" not in text.lower()


def test_traffic_json_counts_produced_and_consumed(client, world):
    async def produce_and_fetch(engine):
        await engine.append("orders", "shop", [Message(b"abc")] * 4, partition=0)
        await engine.fetch("orders", "shop", count=10)

    engine_call(produce_and_fetch)
    client.force_login(world.alice)
    data = client.get("/topics/orders/traffic.json?range=1h").json()
    assert len(data["labels"]) == 60
    assert data["total_produced"] == 4 and data["total_consumed"] >= 1
    assert sum(data["produced_bytes"]) > 0
    assert client.get("/topics/orders/traffic.json?range=2y").status_code == 400
    today = client.get("/topics/orders/traffic.json", {"day": data["labels"] and "2020-01-01"})
    assert today.status_code == 200 and today.json()["total_produced"] == 0
    assert client.get("/topics/orders/traffic.json?day=nope").status_code == 400


def test_dashboard_ranks_topics_by_traffic(client, world):
    """The top topics come from the pipeline's rollup: the last 10 rolled-up minutes,
    only the caller's topics."""
    from datetime import UTC, datetime, timedelta

    from pipeline.models import TrafficMinute

    last = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(minutes=3)
    for name, minute, messages in [
        ("orders", last, 2),
        ("orders", last - timedelta(minutes=1), 3),
        ("orders", last - timedelta(minutes=30), 1000),  # outside the window
        ("blue-secret", last, 99),  # another team's
    ]:
        TrafficMinute.objects.create(
            dimension="topic", name=name, minute=minute, messages=messages, bytes=messages * 10,
            latency_p50_ms=1, latency_p99_ms=2,
        )  # fmt: skip
    client.force_login(world.alice)
    response = client.get("/")
    assert response.context["top_topics"] == [{"code": "orders", "messages": 5, "bytes": 50}]
    assert response.context["clusters"][0]["healthy"]
    client.force_login(world.root)
    ranked = [t["code"] for t in client.get("/").context["top_topics"]]
    assert ranked == ["blue-secret", "orders"]


def test_charts_read_the_pipeline_rollups(client, world):
    """Latency percentiles and lag history come from the rollup tables, minute-aligned."""
    from datetime import UTC, datetime, timedelta

    from pipeline.models import ConsumerLag, TrafficMinute

    minute = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(minutes=5)
    TrafficMinute.objects.create(
        dimension="topic", name="orders", minute=minute, messages=9, bytes=90,
        latency_p50_ms=3, latency_p99_ms=41,
    )  # fmt: skip
    TrafficMinute.objects.create(
        dimension="topic", name="blue-secret", minute=minute, messages=1, bytes=1,
        latency_p50_ms=999, latency_p99_ms=999,
    )  # fmt: skip
    ConsumerLag.objects.create(topic="orders", app="shop", minute=minute, lag=17)
    ConsumerLag.objects.create(topic="orders", app="other", minute=minute, lag=5000)
    client.force_login(world.alice)
    label = minute.strftime("%H:%M")
    traffic = client.get("/topics/orders/traffic.json?range=1h").json()
    at = traffic["labels"].index(label)
    assert (traffic["latency_p50"][at], traffic["latency_p99"][at]) == (3, 41)
    assert [v for v in traffic["latency_p99"] if v is not None] == [41]  # gaps stay gaps
    lag = client.get(f"/consumers/{world.consumer.name}/lag.json?range=1h").json()
    assert lag["samples"] == 1 and lag["lag"][lag["labels"].index(label)] == 17
    assert client.get(f"/consumers/{world.consumer.name}/lag.json?range=9y").status_code == 400
    page = client.get(f"/consumers/{world.consumer.name}/").content.decode()
    assert "chart-lag" in page and "lag.json" in page
    assert "chart-latency" in client.get("/topics/orders/").content.decode()


def test_the_api_gives_traffic_and_lag_history_by_minute(world):
    """The charts' data (traffic.json, lag.json) took a login session only; a monitoring
    job with an API token reads the same rows through the API."""
    from datetime import UTC, datetime, timedelta

    from rest_framework.test import APIClient

    from pipeline.models import ConsumerLag, TrafficMinute

    async def produce_and_fetch(engine):
        await engine.append("orders", "shop", [Message(b"abc")] * 4, partition=0)
        await engine.fetch("orders", "shop", count=10)

    engine_call(produce_and_fetch)
    minute = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(minutes=5)
    TrafficMinute.objects.create(
        dimension="topic", name="orders", minute=minute, messages=9, bytes=90,
        latency_p50_ms=3, latency_p99_ms=41,
    )  # fmt: skip
    ConsumerLag.objects.create(topic="orders", app="shop", minute=minute, lag=17)
    api = APIClient()
    api.force_authenticate(world.alice)
    traffic = api.get("/api/v1/topics/orders/traffic/").json()
    assert len(traffic["minutes"]) == 60 and traffic["total_produced"] == 4
    by_minute = {m["minute_ms"]: m for m in traffic["minutes"]}
    sampled = by_minute[int(minute.timestamp() * 1000)]
    assert (sampled["latency_p50_ms"], sampled["latency_p99_ms"]) == (3, 41)
    assert sum(m["produced_bytes"] for m in traffic["minutes"]) > 0
    lag = api.get(f"/api/v1/consumers/{world.consumer.name}/lag-history/").json()
    assert [m["lag"] for m in lag["minutes"] if m["lag"] is not None] == [17]
    old = api.get("/api/v1/topics/orders/traffic/", {"since": 0, "until": 3_600_000}).json()
    assert old["minutes"][0]["produced"] is None  # 1970: beyond the counters' 30 days
    for bad in ({"since": 10, "until": 10}, {"since": 0, "until": 86_400_001}, {"day": 1}):
        assert api.get("/api/v1/topics/orders/traffic/", bad).status_code == 400, bad
    assert api.get("/api/v1/topics/blue-secret/traffic/").status_code == 404
