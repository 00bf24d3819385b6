"""Pages of the web process render: console, Django admin for every model, API docs."""

from __future__ import annotations

import pytest
from django.apps import apps
from django.contrib import admin

from brokers.models import Team
from tests import factories

pytestmark = pytest.mark.django_db


@pytest.fixture
def demo():
    team = Team.objects.create(name="red")
    cluster = factories.cluster_with_brokers()
    factories.topic("orders", cluster, team)
    factories.app("shop", team)
    return team


def test_console_requires_login(client):
    response = client.get("/")
    assert response.status_code == 302
    assert response["Location"].startswith("/login/")


def test_dashboard_shows_own_team_only(client, demo):
    other = Team.objects.create(name="blue")
    factories.topic("secret-topic", factories.cluster_with_brokers("c2", first_id=5), other)
    client.force_login(factories.user("alice", team=demo))
    response = client.get("/")
    assert response.context["topic_count"] == 1 and response.context["app_count"] == 1
    assert "secret-topic" not in response.content.decode()
    topics = client.get("/topics/").content.decode()
    assert "orders" in topics and "secret-topic" not in topics


def test_login_shows_errors_inline(client, demo):
    factories.user("alice", team=demo)
    response = client.post("/login/", {"username": "alice", "password": "wrong"})
    assert response.status_code == 200
    assert 'role="alert"' in response.content.decode()


def test_every_catalog_model_is_in_the_admin(client, demo):
    client.force_login(factories.user("root", admin=True))
    for label in ("brokers", "api"):
        for model in apps.get_app_config(label).get_models():
            assert admin.site.is_registered(model), model
            url = f"/admin/{label}/{model._meta.model_name}/"
            assert client.get(url).status_code == 200, url


def test_openapi_schema_and_docs(client):
    schema = client.get("/api/schema/")
    assert schema.status_code == 200
    text = schema.content.decode()
    assert "openapi: 3" in text and "/api/v1/topics/" in text and "apiToken" in text
    docs = client.get("/api/docs/")
    assert docs.status_code == 200
    assert "cdn" not in docs.content.decode().lower()


def test_admin_add_topic_lays_out_groups(client):
    cluster = factories.cluster_with_brokers()
    team = Team.objects.create(name="red")
    client.force_login(factories.user("root", admin=True))
    response = client.post(
        "/admin/brokers/topic/add/",
        {
            "code": "from-admin",
            "cluster": cluster.id,
            "team": team.id,
            "type": "normal",
            "partitions": 4,
            "delivery_mode": "RoundRobin",
            "max_queue_size": 10000,
            "overflow_policy": "DropOldest",
            "max_retry_attempts": 3,
            "zbus_mode": 1,
            "surge_alert_receiver": "producer",
            "silence_alert_minutes": 0,
        },
    )
    assert response.status_code == 302, response.context["adminform"].form.errors
    from brokers.models import Topic

    topic = Topic.objects.get(code="from-admin")
    assert [g.partitions for g in topic.groups.order_by("group_id")] == [[0, 1], [2, 3]]
    assert topic.creator == "root"


def test_admin_add_app_shows_token_once(client):
    team = Team.objects.create(name="red")
    client.force_login(factories.user("root", admin=True))
    response = client.post(
        "/admin/brokers/app/add/",
        {
            "code": "adm-app",
            "team": team.id,
            "description": "",
            "tokens-TOTAL_FORMS": 0,
            "tokens-INITIAL_FORMS": 0,
        },
        follow=True,
    )
    page = response.content.decode()
    assert "shown once" in page
    from brokers.models import App

    app = App.objects.get(code="adm-app")
    assert len(app.active_token_hashes()) == 1
    assert "shown once" not in client.get("/admin/brokers/app/").content.decode()


def test_admin_deletes_of_topics_and_consumers_erase_their_data(client, redis_url):
    """The Django admin deletes rows as the API does: what the message store kept for
    them goes too (brokers/erasure.py)."""
    import redis as sync_redis

    from brokers.models import ConsumerPolicy, Topic

    store = sync_redis.Redis.from_url(redis_url)
    store.flushall()
    cluster = factories.cluster_with_brokers()
    team = Team.objects.create(name="red")
    topic = factories.topic("gone", cluster, team, partitions=1, groups=1)
    app, _ = factories.app("shop", team)
    policy = ConsumerPolicy.objects.create(topic=topic, app=app)
    store.set("mq:{r:gone:shop}:due", b"1")
    store.set("mq:{t:gone:0}:c:shop", b"1")
    store.set("mq:{t:gone:0}:s", b"1")
    client.force_login(factories.user("root", admin=True))
    url = f"/admin/brokers/consumerpolicy/{policy.pk}/delete/"
    assert client.post(url, {"post": "yes"}).status_code == 302
    assert store.keys("mq:{*gone*") == [b"mq:{t:gone:0}:s"]  # the group's keys went
    url = f"/admin/brokers/topic/{topic.pk}/delete/"
    assert client.post(url, {"post": "yes"}).status_code == 302
    assert not Topic.objects.filter(code="gone").exists() and store.keys("mq:{*gone*") == []


def test_an_admin_delete_keeps_the_row_when_the_store_does_not_answer(client, monkeypatch):
    """No error page: the delete is rolled back and the page says why."""
    import redis as sync_redis

    import brokers.admin
    from brokers.models import Topic

    def down(*args: object) -> int:
        raise sync_redis.ConnectionError("refused")

    monkeypatch.setattr(brokers.admin, "erase_topic_data", down)
    cluster = factories.cluster_with_brokers()
    team = Team.objects.create(name="red")
    topic = factories.topic("kept", cluster, team, partitions=1, groups=1)
    client.force_login(factories.user("root", admin=True))
    response = client.post(f"/admin/brokers/topic/{topic.pk}/delete/", {"post": "yes"}, follow=True)
    assert response.status_code == 200 and "Nothing was deleted" in response.content.decode()
    assert Topic.objects.filter(code="kept").exists()
    bulk = client.post(
        "/admin/brokers/topic/",
        {"action": "delete_selected", "_selected_action": [topic.pk], "post": "yes"},
        follow=True,
    )
    assert bulk.status_code == 200 and "Nothing was deleted" in bulk.content.decode()
    assert Topic.objects.filter(code="kept").exists()
