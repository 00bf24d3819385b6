"""The console's client pages: the admins' inventory of client kinds, an app's clients,
and each producer's live clients on its topic's page ("verify producer")."""

from __future__ import annotations

import pytest

from tests.client_rows import put_client

pytestmark = pytest.mark.django_db


def connect_and_produce(address: str, *kind: str, produce: bool = True) -> None:
    """A connected client of 'shop' from ``address`` (and its produce to 'orders')."""
    put_client(address, "shop", kind=kind, produce=produce)


def test_only_platform_admins_see_the_inventory(client, world):
    connect_and_produce("10.1.1.1:4000", "jmq4", "JAVA", "4.2.3")
    client.force_login(world.alice)
    assert client.get("/clients/").status_code == 403
    client.force_login(world.root)
    page = client.get("/clients/")
    assert page.status_code == 200
    (kind,) = page.context["kinds"]
    assert (kind["protocol"], kind["language"], kind["version"]) == ("jmq4", "JAVA", "4.2.3")
    assert (kind["apps"], kind["hosts"], kind["connections"]) == (["shop"], 1, 1)
    assert 'href="/apps/shop/"' in page.content.decode()


def test_the_inventory_narrows_to_a_protocol_and_ignores_an_unknown_one(client, world):
    connect_and_produce("10.1.1.1:4000", "jmq4", "JAVA", "4.2.3")
    connect_and_produce("10.1.1.2:4000", "vibemq", "", "js-2.0")
    client.force_login(world.root)
    assert len(client.get("/clients/").context["kinds"]) == 2
    only = client.get("/clients/", {"protocol": "vibemq"}).context["kinds"]
    assert [k["version"] for k in only] == ["js-2.0"]
    for bad in ("nope", "x" * 5000, "<script>"):
        page = client.get("/clients/", {"protocol": bad})
        assert page.status_code == 200 and len(page.context["kinds"]) == 2


def test_an_app_page_lists_its_clients_to_its_team(client, world):
    connect_and_produce("10.1.1.1:4000", "jmq4", "JAVA", "4.2.3")
    client.force_login(world.alice)
    page = client.get("/apps/shop/")
    (row,) = page.context["clients"]
    assert (row["host"], row["kind"], row["connections"]) == ("10.1.1.1", "jmq4 · JAVA · 4.2.3", 1)
    assert [(t["topic"], t["role"]) for t in row["topics"]] == [("orders", "produce")]
    assert "produced" in page.content.decode()
    client.force_login(world.bob)  # another team's
    assert client.get("/apps/shop/").status_code == 404


def test_a_producer_shows_its_live_clients_or_none(client, world):
    client.force_login(world.alice)
    (producer,) = client.get("/topics/orders/").context["producers"].rows
    assert producer.live_clients == []  # no client: what an admin looks for
    connect_and_produce("10.1.1.9:5000", "http-mq", "", "curl/8.5.0")
    (producer,) = client.get("/topics/orders/").context["producers"].rows
    (live,) = producer.live_clients
    assert (live.host, live.kind, live.connections) == ("10.1.1.9", "http-mq · curl/8.5.0", 1)
    assert "10.1.1.9" in client.get("/topics/orders/").content.decode()


def test_a_connected_client_that_never_produced_here_is_not_a_live_producer(client, world):
    connect_and_produce("10.1.1.3:4000", "jmq4", "JAVA", "4.2.3", produce=False)
    client.force_login(world.alice)
    (producer,) = client.get("/topics/orders/").context["producers"].rows
    assert producer.live_clients == []


def test_the_api_lists_an_apps_clients_to_its_team(client, world):
    connect_and_produce("10.1.1.1:4000", "jmq4", "JAVA", "4.2.3")
    client.force_login(world.alice)
    r = client.get("/api/v1/apps/shop/clients/")
    assert r.status_code == 200, r.content
    (row,) = r.json()
    assert (row["host"], row["protocol"], row["language"], row["version"]) == (
        "10.1.1.1",
        "jmq4",
        "JAVA",
        "4.2.3",
    )
    assert row["connections"] == 1 and row["topics"][0]["topic"] == "orders"
    client.force_login(world.bob)
    assert client.get("/api/v1/apps/shop/clients/").status_code == 404


def test_the_api_inventory_is_for_platform_admins_and_checks_its_query(client, world):
    connect_and_produce("10.1.1.1:4000", "jmq4", "JAVA", "4.2.3")
    connect_and_produce("10.1.1.2:4000", "vibemq", "", "js-2.0")
    client.force_login(world.alice)
    assert client.get("/api/v1/clients/").status_code == 403
    client.force_login(world.root)
    kinds = client.get("/api/v1/clients/").json()
    assert sorted(k["protocol"] for k in kinds) == ["jmq4", "vibemq"]
    (jmq4,) = client.get("/api/v1/clients/", {"protocol": "jmq4"}).json()
    assert (jmq4["apps"], jmq4["hosts"], jmq4["connections"]) == (["shop"], ["10.1.1.1"], 1)
    assert client.get("/api/v1/clients/", {"protocol": "x" * 33}).status_code == 400
    assert client.get("/api/v1/clients/", {"other": "1"}).status_code == 400
