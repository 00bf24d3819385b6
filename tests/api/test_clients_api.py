"""The client endpoints of the REST API: an app's client hosts to its team (a token's
user), the platform's client inventory to its admins, their query checks, and 503 when
the store does not answer; an app's producer statistics per topic and client host (the
store-time percentiles and failed messages of its produces) in the API and on its page."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from brokers.catalog_loader import publish
from brokers.engine import EngineError, Message
from brokers.models import ProducerPolicy
from tests import factories
from tests.client_rows import put_client
from tests.console.conftest import World, build_world
from tests.engine_calls import engine_call
from tests.scripts_path import free_port

pytestmark = pytest.mark.django_db


@pytest.fixture
def world(db, redis_url) -> World:
    """The console tests' catalog: teams red (alice, carol) and blue (bob), root."""
    return build_world(redis_url)


def api(user: object | None = None) -> APIClient:
    """An API client with ``user``'s bearer token (anonymous without one)."""
    client = APIClient()
    if user is not None:
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {factories.token_for(user)}")
    return client


def test_anonymous_callers_get_401():
    for path in ("/api/v1/clients/", "/api/v1/apps/shop/clients/"):
        response = api().get(path)
        assert response.status_code == 401 and response.json()["error"]


def test_an_apps_clients_go_to_its_team_only(world):
    put_client("10.4.0.1:4000", "shop", consume=True)
    member = api(world.alice)
    (row,) = member.get("/api/v1/apps/shop/clients/").json()
    assert row["host"] == "10.4.0.1" and row["connections"] == 1
    assert sorted((t["topic"], t["role"]) for t in row["topics"]) == [
        ("orders", "consume"),
        ("orders", "produce"),
    ]
    assert all(t["last_ms"] > 0 for t in row["topics"])
    assert member.get("/api/v1/apps/blue-app/clients/").status_code == 404  # another team's
    assert member.get("/api/v1/apps/nope/clients/").status_code == 404
    assert api(world.bob).get("/api/v1/apps/shop/clients/").status_code == 404
    assert api(world.root).get("/api/v1/apps/shop/clients/").json() == [row]
    assert api(world.bob).get("/api/v1/apps/blue-app/clients/").json() == []


def test_the_inventory_lists_apps_and_hosts_sorted(world):
    other, _ = factories.app("billing", world.red)
    ProducerPolicy.objects.create(topic=world.topic, app=other)
    publish()
    for address, app in (("10.4.0.9:1", "shop"), ("10.4.0.2:1", "billing"), ("10.4.0.5:1", "shop")):
        put_client(address, app)
    put_client("10.4.0.7:1", "shop", kind=("http-mq", "", "curl/8"), how="described")
    admin = api(world.root)
    jmq4, http = admin.get("/api/v1/clients/").json()  # the most connected first
    assert (jmq4["protocol"], jmq4["language"], jmq4["version"]) == ("jmq4", "JAVA", "4.2.3")
    assert jmq4["apps"] == ["billing", "shop"]
    assert jmq4["hosts"] == ["10.4.0.2", "10.4.0.5", "10.4.0.9"]
    assert jmq4["connections"] == 3 and jmq4["last_ms"] > 0
    assert (http["protocol"], http["version"], http["connections"]) == ("http-mq", "curl/8", 0)
    assert admin.get("/api/v1/clients/", {"protocol": "http-mq"}).json() == [http]
    assert admin.get("/api/v1/clients/", {"protocol": "zbus"}).json() == []


def test_the_inventory_is_for_platform_admins_and_checks_its_query(world):
    refused = api(world.carol).get("/api/v1/clients/")  # a team admin
    assert refused.status_code == 403
    assert refused.json()["message"] == "Only platform admins may use this."
    admin = api(world.root)
    for query in ("protocol=" + "x" * 33, "protocol=a&protocol=b", "page=2"):
        response = admin.get(f"/api/v1/clients/?{query}")
        assert response.status_code == 400, query
        assert response.json()["error"]


def test_a_store_outage_answers_503(world, settings):
    settings.REDIS_URL = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    for user, path in (
        (world.alice, "/api/v1/apps/shop/clients/"),
        (world.root, "/api/v1/clients/"),
    ):
        response = api(user).get(path)
        assert response.status_code == 503
        assert response.json()["error"] == "engine_unavailable"


def produce(app: str, address: str, n: int, body: bytes = b"x") -> int:
    """Produce ``n`` messages one by one as ``app`` from ``address``; how many failed."""

    async def run(engine) -> int:
        failed = 0
        for _ in range(n):
            try:
                await engine.append("orders", app, [Message(body)], client_address=address)
            except EngineError:
                failed += 1
        return failed

    return engine_call(run)


def test_an_apps_produce_latency_per_client_host(world):
    assert produce("shop", "10.9.0.1:4000", 3) == 0
    assert produce("shop", "10.9.0.1:4001", 2) == 0  # another connection, same host
    assert produce("shop", "[fd00::7]:9", 1) == 0
    assert produce("shop", "10.9.0.2:1", 2, body=b"x" * (20 * 1024 * 1024)) == 2  # too large
    rows = api(world.alice).get("/api/v1/apps/shop/produce-latency/").json()
    by_host = {(r["topic"], r["client"]): r for r in rows}
    assert sorted(by_host) == [
        ("orders", "10.9.0.1"),
        ("orders", "10.9.0.2"),
        ("orders", "fd00::7"),
    ]
    first = by_host[("orders", "10.9.0.1")]
    assert (first["messages"], first["failed"]) == (5, 0)
    assert sum(b["messages"] for b in first["buckets"]) == 5
    assert first["p99_ms"] is not None and first["p50_ms"] <= first["p90_ms"] <= first["p99_ms"]
    refused = by_host[("orders", "10.9.0.2")]
    assert (refused["messages"], refused["failed"], refused["p50_ms"]) == (0, 2, None)
    assert refused["buckets"] == []
    assert api(world.alice).get("/api/v1/apps/shop/produce-latency/?hours=240").json() == rows


def test_the_window_is_checked_and_the_app_is_its_teams(world):
    member = api(world.alice)
    for query in ("hours=-1", "hours=241", "hours=abc", "hours=", "since=0", "hours=1&hours=2"):
        response = member.get(f"/api/v1/apps/shop/produce-latency/?{query}")
        assert response.status_code == 400, query
        assert response.json()["error"]
    assert member.get("/api/v1/apps/shop/produce-latency/?hours=0").json() == []
    assert member.get("/api/v1/apps/blue-app/produce-latency/").status_code == 404
    assert api().get("/api/v1/apps/shop/produce-latency/").status_code == 401


def test_a_store_outage_answers_503_and_the_page_says_so(world, settings, client):
    settings.REDIS_URL = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    response = api(world.alice).get("/api/v1/apps/shop/produce-latency/")
    assert response.status_code == 503
    assert response.json()["error"] == "engine_unavailable"
    client.force_login(world.alice)
    page = client.get("/apps/shop/")
    assert page.status_code == 200 and page.context["latency_error"]


def test_the_app_page_shows_the_clients_and_offers_the_windows(world, client):
    produce("shop", "10.9.0.1:4000", 4)
    client.force_login(world.alice)
    page = client.get("/apps/shop/")
    assert page.status_code == 200
    (row,) = page.context["latency_rows"]
    assert (row["topic"], row["client"], row["messages"], row["failed"]) == (
        "orders",
        "10.9.0.1",
        4,
        0,
    )
    assert row["p99"].startswith("≤ ")
    html = page.content.decode()
    assert 'id="produce-latency"' in html and "10.9.0.1" in html
    assert '?latency=240#produce-latency"' in html
    week = client.get("/apps/shop/?latency=240")
    assert week.context["latency_label"] == "the last 10 days"
    bad = client.get("/apps/shop/?latency=7")
    assert bad.status_code == 200 and bad.context["latency_window_error"]
    assert bad.context["latency_window"] == "1"
