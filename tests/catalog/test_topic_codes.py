"""Topic codes: the characters VibeMQ allows for queue names (§13), 1-256 of them, a
leading '.', '_' or '-' included; '.' and '..' are refused everywhere (they are path
segments with a meaning of their own in the console's and the API's URLs)."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from brokers.anonymous import open_topic, policy_name
from brokers.catalog_loader import build_snapshot
from brokers.models import ConsumerPolicy, Team, Topic
from brokers.topic_codes import code_for_name, is_topic_code
from tests import factories
from tests.api.test_api import client_for

GOOD = ["_jobs", "-jobs", ".hidden", "a", "q" * 256, "a.b-c_d"]
BAD = [".", "..", "", "q" * 257, "a b", "é", "a:b", "a/b", "a\n"]


@pytest.mark.parametrize("code", GOOD)
def test_good_codes(code):
    assert is_topic_code(code)


@pytest.mark.parametrize("code", BAD)
def test_bad_codes(code):
    assert not is_topic_code(code)


@pytest.mark.django_db
@pytest.mark.parametrize("code", BAD)
def test_the_model_refuses_what_the_rule_refuses(code):
    team = Team.objects.create(name="red")
    cluster = factories.cluster_with_brokers()
    with pytest.raises(ValidationError) as info:
        Topic(code=code, cluster=cluster, team=team).full_clean()
    assert "code" in info.value.error_dict


@pytest.mark.django_db
def test_api_and_console_serve_every_good_code(client):
    Team.objects.create(name="red")
    factories.cluster_with_brokers()
    root = factories.user("root", admin=True)
    api = client_for(root)
    client.force_login(root)
    for code in GOOD:
        created = api.post(
            "/api/v1/topics/", {"code": code, "cluster": "c1", "team": "red"}, format="json"
        )
        assert created.status_code == 201, (code, created.content)
        got = api.get(f"/api/v1/topics/{code}/")
        assert (got.status_code, got.json()["code"]) == (200, code)
        page = client.get(f"/topics/{code}/")
        assert page.status_code == 200, code
    for code in ("..", "q" * 257):
        refused = api.post(
            "/api/v1/topics/", {"code": code, "cluster": "c1", "team": "red"}, format="json"
        )
        assert refused.status_code == 400 and "code" in refused.json()["fields"], code


@pytest.mark.django_db
def test_a_256_character_topic_opens_to_token_less_clients():
    team = Team.objects.create(name="red")
    topic = factories.topic("q" * 256, factories.cluster_with_brokers(), team)
    open_topic(topic)
    policy = ConsumerPolicy.objects.get(topic=topic)
    assert policy.name == policy_name(topic) and len(policy.name) <= 255
    assert policy.name.startswith("anonymous.qqq")


def test_a_name_that_cannot_be_a_code_gets_a_stable_code_of_its_own():
    for name in ("order:created", "订单", "{tag}", ".", "..", "a b", "é" * 300):
        code = code_for_name(name)
        assert is_topic_code(code) and code != name
        assert code == code_for_name(name)  # every broker derives the same
    assert code_for_name("order:created").startswith("order_created-")
    assert code_for_name("订单").startswith("mq-")
    assert code_for_name("订单") != code_for_name("订单2")
    assert code_for_name("orders") == "orders"  # a code is its own


@pytest.mark.django_db
def test_the_api_sets_a_zbus_name_only_where_a_code_cannot_serve(client):
    Team.objects.create(name="red")
    factories.cluster_with_brokers()
    root = factories.user("root", admin=True)
    api = client_for(root)
    client.force_login(root)

    def create(code: str, zbus_name: object) -> object:
        body = {"code": code, "cluster": "c1", "team": "red", "zbus_name": zbus_name}
        return api.post("/api/v1/topics/", body, format="json")

    made = create("orders-cn", "订单")
    assert made.status_code == 201, made.content
    assert api.get("/api/v1/topics/orders-cn/").json()["zbus_name"] == "订单"
    page = client.get("/topics/orders-cn/").content.decode()
    assert "zbus clients call this MQ <code>订单</code>" in page
    assert build_snapshot().zbus_topic("订单").code == "orders-cn"  # what brokers load
    taken = create("a1", "订单")  # another topic's zbus name: a conflict
    assert taken.status_code == 409 and "zbus_name" in taken.json()["fields"], taken.json()
    for code, name in (
        ("a2", "orders"),
        ("a3", "a/b"),
        ("a4", "x y"),
        ("a5", "é" * 128),
    ):
        refused = create(code, name)
        assert refused.status_code == 400 and "zbus_name" in refused.json()["fields"], name
    for code, name in (("b1", ""), ("b2", None), ("b3", "")):  # none: no clash between them
        made = create(code, name)
        assert made.status_code == 201, made.content
        assert made.json()["zbus_name"] is None
    changed = api.patch("/api/v1/topics/b1/", {"zbus_name": "order:created"}, format="json")
    assert changed.status_code == 200 and changed.json()["zbus_name"] == "order:created"
    assert Topic.objects.get(code="b1").zbus_name == "order:created"
