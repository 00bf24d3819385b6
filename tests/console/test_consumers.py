"""Consumer progress (page and htmx partial), the message browser, retry and DLQ lists."""

from __future__ import annotations

import time

import pytest

from brokers.catalog_loader import publish
from brokers.engine import RETRY_PARTITION, Message, RetryType
from brokers.protocols.zbus import Message as ZbusMessage
from brokers.protocols.zbus import RequestLine
from brokers.servers.zbus.stored import to_engine
from mqcloud.approvals.models import Application, AuditEvent
from tests.engine_calls import engine_call

pytestmark = pytest.mark.django_db


def test_progress_partial_shows_lag_lock_and_client(client, world):
    async def run(engine):
        await engine.append("orders", "shop", [Message(b"a")] * 5, partition=0)
        return await engine.fetch(
            "orders", "shop", count=2, ack_timeout_ms=60_000, owner="c-1", address="10.1.2.3:4000"
        )

    fetched = engine_call(run)
    assert fetched.messages
    client.force_login(world.alice)
    response = client.get("/consumers/shop.orders/progress/", HTTP_HX_REQUEST="true")
    text = response.content.decode()
    assert response.status_code == 200 and "<html" not in text
    assert 'hx-trigger="every 2s"' in text
    rows = {r["p"].partition: r for r in response.context["partitions"]}
    assert rows[0]["p"].max_index == 5 and rows[0]["p"].lag == 5
    assert rows[0]["locked"] and rows[0]["p"].lock_owner == "c-1"
    assert "10.1.2.3" in text and rows[0]["last_access"]
    assert response.context["total_lag"] == 5


def test_consumer_page_offers_actions_to_owners_only(client, world):
    client.force_login(world.alice)
    page = client.get("/consumers/shop.orders/").content.decode()
    assert "kind=pause" in page and "kind=offset_reset" in page
    client.force_login(world.root)
    assert client.get("/consumers/shop.orders/").status_code == 200


def test_consumer_page_says_where_http_mq_lives(client, world, settings):
    from brokers.models import ConsumerPolicy

    settings.HTTPMQ_PUBLIC_URL = "http://mq.example:8081/"
    ConsumerPolicy.objects.filter(name="shop.orders").update(http_enabled=True)
    client.force_login(world.alice)
    page = client.get("/consumers/shop.orders/").content.decode()
    assert "http://mq.example:8081/mq/message?topic=orders&amp;consumer=shop.orders" in page
    ConsumerPolicy.objects.filter(name="shop.orders").update(http_enabled=False)
    assert 'id="httpmq-help"' not in client.get("/consumers/shop.orders/").content.decode()


def test_message_browser_by_index_business_id_and_time(client, world):
    now = int(time.time() * 1000)

    async def run(engine):
        await engine.append(
            "orders",
            "shop",
            [Message(b"first", business_id="order-1"), Message(b"\xff\x00bin", business_id="b2")],
            partition=0,
        )
        await engine.append(
            "orders", "shop", [Message(b"other", business_id="order-9")], partition=1
        )
        await engine.append(
            "orders", "shop", [Message(b"{}", attributes={"vibemq.id": "vibe-3"})], partition=1
        )
        zbus = ZbusMessage(RequestLine(), {"cmd": "produce", "msgid": "zb-4"}, b"zb")
        await engine.append("orders", "shop", [to_engine(zbus)], partition=1)

    engine_call(run)
    client.force_login(world.alice)
    url = "/topics/orders/messages/"
    by_index = client.get(url, {"mode": "index", "partition": 0, "start": 0, "count": 10})
    rows = by_index.context["rows"]
    assert [(r.index, r.business_id) for r in rows] == [(0, "order-1"), (1, "b2")]
    assert not rows[1].body_is_text and "ff 00" in rows[1].body_preview
    by_bid = client.get(url, {"mode": "business", "business_id": "order-9"}).context["rows"]
    assert [(r.partition, r.business_id) for r in by_bid] == [(1, "order-9")]
    # any id a client saw: a JMQ4 position, a VibeMQ message id, a zbus msgid (properties)
    by_position = client.get(url, {"mode": "business", "business_id": "0:1"}).context["rows"]
    assert [(r.partition, r.index) for r in by_position] == [(0, 1)]
    by_vibemq = client.get(url, {"mode": "business", "business_id": "vibe-3"}).context["rows"]
    assert [(r.partition, r.index) for r in by_vibemq] == [(1, 1)]
    by_zbus = client.get(url, {"mode": "business", "business_id": "zb-4"}).context["rows"]
    assert [(r.partition, r.index, r.protocol) for r in by_zbus] == [(1, 2, "zbus")]
    since = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(now / 1000 - 60))
    by_time = client.get(url, {"mode": "time", "since": since}).context["rows"]
    assert len(by_time) == 5
    future = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(now / 1000 + 3600))
    assert client.get(url, {"mode": "time", "since": future}).context["rows"] == []
    partial = client.get(url, {"mode": "index", "partition": 1}, HTTP_HX_REQUEST="true")
    assert "<html" not in partial.content.decode() and "order-9" in partial.content.decode()


def test_message_browser_validates_inline(client, world):
    client.force_login(world.alice)
    url = "/topics/orders/messages/"
    response = client.get(url, {"mode": "index", "partition": 7})
    assert "partition" in response.context["form"].errors
    assert "The topic has partitions 0–1" in response.content.decode()
    bad_time = client.get(url, {"mode": "time", "since": "yesterday"})
    assert "since" in bad_time.context["form"].errors
    missing = client.get(url, {"mode": "business"})
    assert "business_id" in missing.context["form"].errors
    beyond = client.get(url, {"mode": "index", "partition": 0, "start": 99})
    assert "holds indexes" in beyond.context["error"]


def _retries(n: int) -> None:
    async def run(engine):
        await engine.append(
            "orders", "shop", [Message(f"m{i}".encode()) for i in range(n)], partition=0
        )
        fetched = await engine.fetch("orders", "shop", count=n)
        assert fetched.partition == 0 and len(fetched.messages) == n
        for i in range(n):
            await engine.ack("orders", "shop", 0, [i], retry_type=RetryType.EXCEPTION)
        return [r.id for r in await engine.retries("orders", "shop")]

    return engine_call(run)


def test_retry_list_and_team_admin_actions(client, world):
    ids = _retries(3)
    assert len(ids) == 3
    client.force_login(world.alice)
    page = client.get("/consumers/shop.orders/retry/")
    assert [r.id for r in page.context["rows"]] == ids
    # a member sees the list but may not skip
    assert (
        client.post(
            "/consumers/shop.orders/retry/action/", {"action": "retry-skip", "ids": ids[:1]}
        ).status_code
        == 403
    )
    client.force_login(world.carol)
    done = client.post(
        "/consumers/shop.orders/retry/action/",
        {"action": "retry-skip", "ids": ids[:1]},
        follow=True,
    )
    assert "1 message(s) skipped" in done.content.decode()
    assert engine_call(lambda e: e.retry_counts("orders", "shop"))[0] == 2
    assert AuditEvent.objects.filter(action="retry-skip", actor=world.carol).exists()
    bad = client.post(
        "/consumers/shop.orders/retry/action/", {"action": "retry-skip", "ids": ["x"]}, follow=True
    )
    assert "whole numbers" in bad.content.decode()
    wrong_list = client.post(
        "/consumers/shop.orders/retry/action/", {"action": "dlq-purge"}, follow=True
    )
    assert "Unknown action" in wrong_list.content.decode()
    assert client.get("/consumers/shop.orders/nope/").status_code == 404


def test_dead_letter_resend_is_an_application(client, world):
    client.force_login(world.alice)
    response = client.post(
        "/consumers/shop.orders/dlq/action/", {"action": "dlq-resend", "ids": ["4", "5"]}
    )
    assert response.status_code == 302
    assert "kind=dlq_resend" in response["Location"] and "ids=4,5" in response["Location"]
    form = client.get(response["Location"])
    assert form.context["form"].initial["ids"] == "4,5"
    filed = client.post(
        "/applications/new/",
        {"kind": "dlq_resend", "consumer": "shop.orders", "ids": "4,5"},
    )
    app = Application.objects.get(kind="dlq_resend")
    assert filed["Location"] == f"/applications/{app.pk}/"
    assert app.payload == {"consumer": "shop.orders", "ids": [4, 5]} and app.status == "pending"


def test_skipping_retries_older_than_a_time_is_an_application(client, world):
    _retries(1)
    client.force_login(world.alice)
    page = client.get("/consumers/shop.orders/retry/").content.decode()
    assert "kind=retry_skip&amp;consumer=shop.orders" in page
    form = client.get("/applications/new/?kind=retry_skip&consumer=shop.orders")
    assert form.context["form"].initial["consumer"] == "shop.orders"
    wrong = client.post(
        "/applications/new/",
        {"kind": "retry_skip", "consumer": "shop.orders", "before": "yesterday"},
    )
    assert wrong.status_code == 200 and "before" in wrong.context["form"].errors
    filed = client.post(
        "/applications/new/",
        {
            "kind": "retry_skip",
            "consumer": "shop.orders",
            "before": "2026-01-31 23:59:00.000",
            "business_id": "order-17",
        },
    )
    app = Application.objects.get(kind="retry_skip")
    assert filed["Location"] == f"/applications/{app.pk}/"
    assert app.payload == {
        "consumer": "shop.orders",
        "before_ms": 1769903940000,
        "business_id": "order-17",
    }


def test_dead_letter_list_and_purge_by_team_admin(client, world):
    world.consumer.err_times = 1
    world.consumer.save()
    publish()
    ids = _retries(2)

    async def fail_again(engine):
        for rid in ids:
            await engine.ack(
                "orders", "shop", RETRY_PARTITION, [rid], retry_type=RetryType.EXCEPTION
            )

    engine_call(fail_again)
    dead = engine_call(lambda e: e.retry_counts("orders", "shop"))[1]
    assert dead == 2
    client.force_login(world.alice)
    listed = client.get("/consumers/shop.orders/dlq/")
    assert len(listed.context["rows"]) == 2 and listed.context["dead"] == 2
    client.force_login(world.carol)
    response = client.post(
        "/consumers/shop.orders/dlq/action/", {"action": "dlq-purge"}, follow=True
    )
    assert "2 message(s) purged" in response.content.decode()
    assert engine_call(lambda e: e.retry_counts("orders", "shop")) == (0, 0)
    client.force_login(world.bob)
    assert (
        client.post("/consumers/shop.orders/dlq/action/", {"action": "dlq-purge"}).status_code
        == 404
    )


def test_a_broadcast_clients_own_retries_are_listed_and_skipped_apart(client, world):
    """The client chosen on the consumer page carries to its retry list and actions."""
    from brokers.models import ConsumerPolicy

    ConsumerPolicy.objects.filter(pk=world.consumer.pk).update(mode="broadcast")
    publish()

    async def run(engine):
        await engine.append("orders", "shop", [Message(b"a"), Message(b"b")], partition=0)
        got = await engine.fetch("orders", "shop", count=2, client_id="c1", owner="c1")
        assert got.partition == 0 and len(got.messages) == 2
        await engine.ack(
            "orders", "shop", 0, [0, 1], retry_type=RetryType.EXCEPTION, client_id="c1",
            owner="c1", token=got.lock_token,
        )  # fmt: skip
        return [r.id for r in await engine.retries("orders", "shop", client_id="c1")]

    ids = engine_call(run)
    assert len(ids) == 2
    client.force_login(world.carol)
    detail = client.get("/consumers/shop.orders/", {"client": "c1"})
    assert detail.context["retries"] == 2 and "?client=c1" in detail.content.decode()
    assert client.get("/consumers/shop.orders/").context["retries"] == 0  # the group's
    page = client.get("/consumers/shop.orders/retry/", {"client": "c1"})
    assert [r.id for r in page.context["rows"]] == ids
    assert client.get("/consumers/shop.orders/retry/").context["rows"] == []
    done = client.post(
        "/consumers/shop.orders/retry/action/?client=c1",
        {"action": "retry-skip", "ids": ids[:1]},
    )
    assert done.status_code == 302 and done["Location"].endswith("/retry/?client=c1")
    assert engine_call(lambda e: e.retry_counts("orders", "shop", client_id="c1"))[0] == 1
