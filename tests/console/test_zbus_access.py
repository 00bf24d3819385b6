"""Opening a topic to token-less zbus clients from the console: the topic page's state and
button, the application and its approval, the badge in the topic list, the anonymous app
on the app and consumer pages, and what the console refuses (reserved codes, tokens)."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from brokers import anonymous
from brokers.catalog_loader import build_snapshot
from brokers.models import App, AppToken, ConsumerPolicy, ProducerPolicy, Topic
from mqcloud.approvals.models import Application, AuditEvent, Notification, Status
from tests import factories

pytestmark = pytest.mark.django_db

LIST_BADGE = '<mark class="badge badge-open" title='


def apply_in_console(client, kind: str, code: str):
    """What the topic page's button posts."""
    return client.post("/applications/new/", {"kind": kind, "code": code})


def approve_all(client, root) -> None:
    client.force_login(root)
    for application in Application.objects.filter(status=Status.PENDING):
        client.post(f"/applications/{application.pk}/approve/")


def anonymous_policies(snapshot, topic: str, app: str) -> tuple[list, list]:
    producers = [p for p in snapshot.producers if p.topic == topic and p.app == app]
    consumers = [c for c in snapshot.consumers if c.topic == topic and c.app == app]
    return producers, consumers


def test_open_by_application_then_close(client, world):
    client.force_login(world.alice)
    page = client.get("/topics/orders/").content.decode()
    assert "Closed: zbus clients need an app token" in page
    assert "Apply to open zbus access" in page and "Apply to close zbus access" not in page
    assert LIST_BADGE not in client.get("/topics/").content.decode()

    filed = apply_in_console(client, "zbus_open", "orders")
    application = Application.objects.get()
    assert filed["Location"] == f"/applications/{application.pk}/"
    assert (application.kind, application.status) == ("zbus_open", "pending")
    assert application.target == "topic:orders" and application.payload == {"code": "orders"}
    assert "Open zbus access: token-less zbus clients" in client.get(filed["Location"]).text
    assert not anonymous.is_open(world.topic)

    approve_all(client, world.root)
    application.refresh_from_db()
    assert application.status == "approved", application.error
    assert application.result == {"topic": "orders", "zbus_open": True}
    assert anonymous.is_open(world.topic)
    snapshot = build_snapshot()
    app_code = snapshot.topics["orders"].anonymous_app
    assert app_code == App.objects.get(team=world.red, is_anonymous=True).code
    producers, consumers = anonymous_policies(snapshot, "orders", app_code)
    assert len(producers) == 1 and len(consumers) == 1
    assert consumers[0].start_position == "earliest" and not consumers[0].broadcast
    actions = AuditEvent.objects.filter(target="topic:orders").order_by("id")
    assert list(actions.values_list("action", flat=True)) == ["submitted", "approved", "executed"]
    assert Notification.objects.filter(user=world.alice, application=application).exists()

    client.force_login(world.alice)
    assert client.get("/topics/").content.decode().count(LIST_BADGE) == 1
    page = client.get("/topics/orders/").content.decode()
    assert "Open to token-less zbus clients" in page
    assert "Apply to close zbus access" in page and "Apply to open zbus access" not in page
    name = anonymous.policy_name(world.topic)
    assert name in page and "badge-anonymous" in page  # its producer and consumer, labelled
    consumers_page = client.get("/consumers/").content.decode()
    assert name in consumers_page and "badge-anonymous" in consumers_page

    apply_in_console(client, "zbus_close", "orders")
    approve_all(client, world.root)
    assert not anonymous.is_open(world.topic)
    assert not ProducerPolicy.objects.filter(topic=world.topic, app__is_anonymous=True).exists()
    assert not ConsumerPolicy.objects.filter(topic=world.topic, app__is_anonymous=True).exists()
    assert anonymous_policies(build_snapshot(), "orders", app_code) == ([], [])
    closed = Application.objects.get(kind="zbus_close")
    assert closed.status == "approved" and closed.result == {"topic": "orders", "zbus_open": False}
    client.force_login(world.alice)
    assert "Closed: zbus clients need an app token" in client.get("/topics/orders/").text


def test_opening_an_open_topic_or_closing_a_closed_one_is_an_inline_error(client, world):
    client.force_login(world.alice)
    closed = apply_in_console(client, "zbus_close", "orders")
    assert "orders is already closed" in str(closed.context["form"].errors["code"])
    anonymous.open_topic(world.topic)
    opened = apply_in_console(client, "zbus_open", "orders")
    assert "orders is already open" in str(opened.context["form"].errors["code"])
    assert not Application.objects.exists()


def test_another_team_neither_sees_nor_applies(client, world):
    client.force_login(world.bob)
    assert client.get("/topics/orders/").status_code == 404
    response = apply_in_console(client, "zbus_open", "orders")
    assert "code" in response.context["form"].errors
    assert not Application.objects.exists()


def test_one_open_application_per_topic(client, world):
    client.force_login(world.alice)
    client.post("/applications/new/", {"kind": "topic_delete", "code": "orders"})
    second = apply_in_console(client, "zbus_open", "orders")
    assert "already has an open application" in str(second.context["form"].non_field_errors())
    assert Application.objects.count() == 1


def test_topic_list_marks_open_topics_in_a_constant_number_of_queries(client, world):
    client.force_login(world.root)
    with CaptureQueriesContext(connection) as few:
        assert client.get("/topics/").status_code == 200
    cluster = world.topic.cluster
    for i in range(12):
        topic = factories.topic(f"bulk-{i}", cluster, world.red, partitions=1, groups=1)
        if i % 3 == 0:
            anonymous.open_topic(topic)
    anonymous.open_topic(world.blue_topic)
    with CaptureQueriesContext(connection) as many:
        page = client.get("/topics/").content.decode()
    assert len(many) == len(few)
    assert page.count(LIST_BADGE) == 5  # bulk-0, -3, -6, -9 and blue-secret
    assert Topic.objects.count() == 14


def test_anonymous_app_is_labelled_and_has_no_tokens(client, world):
    anonymous.open_topic(world.topic)
    app = App.objects.get(team=world.red, is_anonymous=True)
    client.force_login(world.carol)  # a team admin
    apps = client.get("/apps/").content.decode()
    assert app.code in apps and "badge-anonymous" in apps
    page = client.get(f"/apps/{app.code}/").content.decode()
    assert "Anonymous app" in page and "Rotate token" not in page
    assert anonymous.policy_name(world.topic) in page
    refused = client.post(f"/apps/{app.code}/rotate/")
    assert refused.status_code == 400 and "it has no tokens" in refused.content.decode()
    assert not AppToken.objects.filter(app=app).exists()
    # producer and consumer applications do not offer the anonymous app
    form = client.get("/applications/new/", {"kind": "producer_create"}).context["form"]
    assert app.code not in dict(form.fields["app"].choices)


@pytest.mark.parametrize("code", ["anonymous", "anonymous.red", "anonymous.x"])
def test_reserved_app_codes_are_refused(client, world, code):
    client.force_login(world.carol)
    response = client.post("/apps/new/", {"code": code, "team": "red"})
    assert "reserved" in str(response.context["form"].errors["code"])
    assert not App.objects.filter(code=code).exists()
