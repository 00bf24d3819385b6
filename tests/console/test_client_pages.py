"""The client pages beyond the happy path: what counts as a producer's live client over
time, "none" on the page, one engine read for a page of producers, the inventory's
"unknown" protocol, the navigation, a consumer's live clients, and a store that does not
answer."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from brokers.catalog_loader import publish
from brokers.models import ProducerPolicy
from mqcloud.console import clients, engine_calls
from tests import factories
from tests.client_rows import put_client
from tests.scripts_path import free_port

pytestmark = pytest.mark.django_db


def later(monkeypatch, seconds: float) -> None:
    """The console's clock (not the store's) runs ``seconds`` ahead."""
    now = time.time() + seconds
    monkeypatch.setattr(clients, "time", SimpleNamespace(time=lambda: now))


def live_hosts(client) -> list[str]:
    (producer,) = client.get("/topics/orders/").context["producers"].rows
    return [c.host for c in producer.live_clients]


def test_a_producer_without_a_live_client_reads_none(client, world):
    client.force_login(world.alice)
    page = client.get("/topics/orders/").content.decode()
    assert '<td class="live-clients"><span class="bad">none</span></td>' in page


def test_live_is_produced_in_the_last_minute_or_connected_and_produced(client, world, monkeypatch):
    put_client("10.2.0.1:5000", "shop", kind=("http-mq", "", "curl/8"), how="described")
    put_client("10.2.0.2:4000", "shop", how="connected")
    put_client("10.2.0.3:4000", "shop", how="disconnected")
    client.force_login(world.alice)
    assert sorted(live_hosts(client)) == ["10.2.0.1", "10.2.0.2", "10.2.0.3"]
    later(monkeypatch, 120)
    assert live_hosts(client) == ["10.2.0.2"]  # the connection alone keeps it live
    page = client.get("/topics/orders/").content.decode()
    assert "10.2.0.2 <small" in page and "10.2.0.1" not in page


def test_a_consumer_only_client_is_no_live_producer(client, world):
    put_client("10.2.0.4:4000", "shop", produce=False, consume=True)
    client.force_login(world.alice)
    assert live_hosts(client) == []
    (row,) = client.get("/apps/shop/").context["clients"]
    assert [(t["topic"], t["role"]) for t in row["topics"]] == [("orders", "consume")]
    assert "orders</a> consumed" in client.get("/apps/shop/").content.decode()


def test_one_engine_read_for_a_page_of_producers(client, world, monkeypatch):
    other, _ = factories.app("billing", world.red)
    ProducerPolicy.objects.create(topic=world.topic, app=other)
    publish()
    put_client("10.2.0.5:4000", "billing")
    calls = []
    read = engine_calls.clients_of

    def counted(apps):
        calls.append(sorted(apps))
        return read(apps)

    monkeypatch.setattr(engine_calls, "clients_of", counted)
    client.force_login(world.alice)
    rows = client.get("/topics/orders/").context["producers"].rows
    assert calls == [["billing", "shop"]]
    live = {p.app.code: [c.host for c in p.live_clients] for p in rows}
    assert live == {"billing": ["10.2.0.5"], "shop": []}


def test_a_client_that_never_did_anything_shows_a_dash(client, world):
    put_client("10.2.0.6:4000", "shop", produce=False)
    client.force_login(world.root)
    (kind,) = client.get("/clients/").context["kinds"]
    assert (kind["connections"], kind["last"]) == (1, "—")
    page = client.get("/apps/shop/").content.decode()
    assert '<td class="num">1</td>\n    <td>—</td>' in page


def test_the_inventory_narrows_to_clients_whose_protocol_nobody_stated(client, world):
    put_client("10.2.0.7:4000", "shop", how="silent")
    put_client("10.2.0.8:4000", "shop")
    client.force_login(world.root)
    page = client.get("/clients/")
    assert page.context["protocols"] == ["jmq4", "unknown"]
    assert len(page.context["kinds"]) == 2
    narrowed = client.get("/clients/", {"protocol": "unknown"})
    (kind,) = narrowed.context["kinds"]
    assert (kind["protocol"], kind["language"], kind["version"]) == ("unknown", "—", "—")
    html = narrowed.content.decode()
    assert html.count(" selected") == 1 and '<option value="unknown" selected>' in html
    assert client.get("/clients/", {"protocol": ""}).context["protocol"] == ""


def test_only_admins_get_the_link_and_the_page(client, world):
    assert client.get("/clients/").status_code == 302  # to the login page
    client.force_login(world.carol)  # a team admin, not a platform admin
    assert 'href="/clients/"' not in client.get("/").content.decode()
    assert client.get("/clients/").status_code == 403
    client.force_login(world.root)
    assert 'href="/clients/"' in client.get("/").content.decode()


def test_a_store_outage_is_a_notice_on_every_page(client, world, settings):
    put_client("10.2.0.9:4000", "shop")
    settings.REDIS_URL = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    client.force_login(world.root)
    inventory = client.get("/clients/")
    assert inventory.status_code == 200 and inventory.context["kinds"] == []
    assert "Engine unavailable" in inventory.content.decode()
    app = client.get("/apps/shop/")
    assert app.status_code == 200 and app.context["clients_error"]
    topic = client.get("/topics/orders/")
    assert topic.status_code == 200 and topic.context["clients_error"]
    (producer,) = topic.context["producers"].rows
    assert producer.live_clients is None
    assert '<td class="live-clients"><span class="muted">unknown</span></td>' in (
        topic.content.decode()
    )


def test_the_consumer_page_lists_its_live_clients(client, world, monkeypatch):
    """Verify consumer: the hosts of the consumer's app that consumed its topic in the
    last minute, or consumed it and are connected; producing alone does not count."""
    url = f"/consumers/{world.consumer.name}/"
    client.force_login(world.alice)
    page = client.get(url)
    assert page.context["live_clients"] == []
    assert "None: no client consumes it now." in page.content.decode()
    put_client("10.3.0.1:4000", "shop", produce=False, consume=True, how="connected")
    put_client("10.3.0.2:4000", "shop", produce=False, consume=True, how="disconnected")
    put_client("10.3.0.3:4000", "shop", produce=True, how="connected")
    assert sorted(c.host for c in client.get(url).context["live_clients"]) == [
        "10.3.0.1",
        "10.3.0.2",
    ]
    later(monkeypatch, 120)
    page = client.get(url)
    assert [c.host for c in page.context["live_clients"]] == ["10.3.0.1"]
    # (the partitions' table may still name 10.3.0.2 as the last to look at a partition)
    shown = page.content.decode()
    assert "<td>10.3.0.1</td>" in shown and "<td>10.3.0.2</td>" not in shown


def test_the_consumer_page_says_when_the_listing_does_not_answer(client, world, settings):
    settings.REDIS_URL = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    client.force_login(world.alice)
    page = client.get(f"/consumers/{world.consumer.name}/")
    assert page.status_code == 200 and page.context["live_clients"] is None
    assert "The client listing did not answer" in page.content.decode()
