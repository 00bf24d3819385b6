"""Through /api/v1/: the zbus_open and zbus_close applications, a topic's ``zbus_open``,
anonymous apps (``is_anonymous``, no tokens) and the reserved names, and the schema."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from brokers import anonymous
from brokers.catalog_loader import build_snapshot
from brokers.models import App, AppToken, ConsumerPolicy, ProducerPolicy, Team
from mqcloud.approvals.models import Application, ApprovalSettings, AuditEvent
from tests import factories

pytestmark = pytest.mark.django_db


@pytest.fixture
def world():
    red, blue = Team.objects.create(name="red"), Team.objects.create(name="blue")
    cluster = factories.cluster_with_brokers()
    w = {
        "red": red,
        "cluster": cluster,
        "orders": factories.topic("orders", cluster, red, partitions=1, groups=1),
        "blue_topic": factories.topic("blue-topic", cluster, blue, partitions=1, groups=1),
        "alice": client_for(factories.user("alice", team=red)),
        "carol": client_for(factories.user("carol", team=red, role="admin")),
        "bob": client_for(factories.user("bob", team=blue)),
        "root": client_for(factories.user("root", admin=True)),
    }
    w["shop"], _ = factories.app("shop", red)
    return w


def client_for(user) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {factories.token_for(user)}")
    return client


def apply(client: APIClient, kind: str, payload: dict):
    return client.post("/api/v1/applications/", {"kind": kind, "payload": payload}, format="json")


def zbus_open(client: APIClient, code: str) -> bool:
    response = client.get(f"/api/v1/topics/{code}/")
    assert response.status_code == 200, response.json()
    return response.json()["zbus_open"]


def test_open_and_close_by_application(world):
    assert zbus_open(world["alice"], "orders") is False
    filed = apply(world["alice"], "zbus_open", {"code": "orders"})
    assert filed.status_code == 201, filed.json()
    body = filed.json()
    assert (body["status"], body["target"], body["team"]) == ("pending", "topic:orders", "red")

    approved = world["root"].post(f"/api/v1/applications/{body['id']}/approve/")
    assert approved.status_code == 200 and approved.json()["status"] == "approved"
    assert anonymous.is_open(world["orders"])
    assert zbus_open(world["alice"], "orders") is True
    snapshot = build_snapshot()
    app = snapshot.topics["orders"].anonymous_app
    assert app == App.objects.get(team=world["red"], is_anonymous=True).code
    assert [p.topic for p in snapshot.producers if p.app == app] == ["orders"]
    assert [c.topic for c in snapshot.consumers if c.app == app] == ["orders"]
    audit = world["alice"].get("/api/v1/audit-events/?search=topic:orders").json()["results"]
    assert {e["action"] for e in audit} == {"submitted", "approved", "executed"}

    again = apply(world["alice"], "zbus_open", {"code": "orders"})
    assert again.status_code == 400
    assert again.json()["message"] == "code: orders is already open to token-less zbus clients."

    closing = apply(world["alice"], "zbus_close", {"code": "orders"}).json()
    world["root"].post(f"/api/v1/applications/{closing['id']}/approve/")
    assert zbus_open(world["alice"], "orders") is False
    assert not ProducerPolicy.objects.filter(app__is_anonymous=True).exists()
    assert not ConsumerPolicy.objects.filter(app__is_anonymous=True).exists()
    snapshot = build_snapshot()
    assert not [p for p in snapshot.producers if p.app == app]
    assert not [c for c in snapshot.consumers if c.app == app]
    closed = apply(world["alice"], "zbus_close", {"code": "orders"})
    assert closed.status_code == 400 and "already closed" in closed.json()["message"]


def test_auto_approved_kind_executes_at_once(world):
    ApprovalSettings.objects.update_or_create(id=1, defaults={"auto_approve": ["zbus_open"]})
    done = apply(world["alice"], "zbus_open", {"code": "orders"}).json()
    assert done["status"] == "approved" and done["auto_approved"] is True
    assert AuditEvent.objects.filter(action="auto-approved", target="topic:orders").exists()
    assert anonymous.is_open(world["orders"])


@pytest.mark.parametrize(
    ("kind", "payload", "field"),
    [
        ("zbus_open", {"code": "orders"}, "code"),  # another team's topic
        ("zbus_close", {"code": "orders"}, "code"),
        ("zbus_open", {"code": "no-such-topic"}, "code"),
        ("zbus_open", {}, "code"),
        ("zbus_open", {"code": 7}, "code"),
        ("zbus_open", {"code": "or\x00ders"}, "code"),  # PostgreSQL text holds no NUL
        ("producer_delete", {"name": "\x00"}, "name"),
    ],
)
def test_bad_applications_are_refused_with_the_envelope(world, kind, payload, field):
    response = apply(world["bob"], kind, payload)
    assert response.status_code == 400
    assert response.json()["error"] == "invalid" and field in response.json()["fields"]
    assert not Application.objects.exists()


def test_admin_may_apply_for_any_team(world):
    response = apply(world["root"], "zbus_open", {"code": "blue-topic"})
    assert response.status_code == 201 and response.json()["team"] == "blue"


def test_topic_list_computes_zbus_open_in_a_constant_number_of_queries(world):
    def listed() -> tuple[dict[str, bool], int]:
        with CaptureQueriesContext(connection) as queries:
            response = world["root"].get("/api/v1/topics/?limit=100")
        rows = {t["code"]: t["zbus_open"] for t in response.json()["results"]}
        return rows, len(queries)

    listed()  # the token's first use records its last-used time (at most once a minute)
    _, few = listed()
    for i in range(10):
        topic = factories.topic(f"bulk-{i}", world["cluster"], world["red"], 1, 1)
        if i % 2:
            anonymous.open_topic(topic)
    anonymous.open_topic(world["blue_topic"])
    rows, many = listed()
    assert many == few
    assert {code for code, is_open in rows.items() if is_open} == {
        "bulk-1", "bulk-3", "bulk-5", "bulk-7", "bulk-9", "blue-topic"
    }  # fmt: skip
    assert world["bob"].get("/api/v1/topics/").json()["results"][0]["zbus_open"] is True


def test_a_half_open_topic_is_not_open_and_closes(world):
    anonymous.open_topic(world["orders"])
    ConsumerPolicy.objects.filter(app__is_anonymous=True).delete()
    assert zbus_open(world["alice"], "orders") is False
    closing = apply(world["alice"], "zbus_close", {"code": "orders"})
    assert closing.status_code == 201, closing.json()


def test_anonymous_app_is_listed_with_no_tokens(world):
    anonymous.open_topic(world["orders"])
    code = App.objects.get(is_anonymous=True).code
    (row,) = world["alice"].get("/api/v1/apps/?is_anonymous=true").json()["results"]
    assert (row["code"], row["is_anonymous"], row["token_hints"]) == (code, True, [])
    assert world["alice"].get("/api/v1/apps/shop/").json()["is_anonymous"] is False

    rotated = world["carol"].post(f"/api/v1/apps/{code}/rotate-token/")
    assert rotated.status_code == 400 and rotated.json()["error"] == "invalid"
    assert "anonymous app has no tokens" in rotated.json()["message"]
    assert world["alice"].post(f"/api/v1/apps/{code}/rotate-token/").status_code == 403
    assert not AppToken.objects.filter(app__is_anonymous=True).exists()

    admin = world["root"].patch(f"/api/v1/apps/{code}/", {"is_admin": True}, format="json")
    assert admin.status_code == 400 and "is_admin" in admin.json()["fields"]
    read_only = world["root"].patch("/api/v1/apps/shop/", {"is_anonymous": True}, format="json")
    assert read_only.status_code == 200 and read_only.json()["is_anonymous"] is False


@pytest.mark.parametrize("code", ["anonymous", "anonymous.red", "anonymous.new"])
def test_reserved_app_codes_are_refused(world, code):
    response = world["carol"].post("/api/v1/apps/", {"code": code, "team": "red"}, format="json")
    assert response.status_code == 400 and "reserved" in response.json()["fields"]["code"][0]
    assert not App.objects.filter(code=code).exists()
    fine = world["carol"].post("/api/v1/apps/", {"code": "anonymously", "team": "red"})
    assert fine.status_code == 201


@pytest.mark.parametrize("endpoint", ["producer-policies", "consumer-policies"])
def test_reserved_policy_names_and_anonymous_apps_are_refused(world, endpoint):
    url = f"/api/v1/{endpoint}/"
    reserved = {"topic": "orders", "app": "shop", "name": "anonymous.orders"}
    response = world["root"].post(url, reserved, format="json")
    assert response.status_code == 400 and "reserved" in response.json()["fields"]["name"][0]

    anonymous.open_topic(world["orders"])  # red's anonymous app, on red's topic
    app = App.objects.get(team=world["red"], is_anonymous=True).code
    made = world["root"].post(url, {"topic": "blue-topic", "app": app, "name": "x1"}, format="json")
    assert made.status_code == 400 and "zbus_open" in made.json()["fields"]["app"][0]

    kind = "producer_create" if endpoint == "producer-policies" else "consumer_create"
    applied = apply(world["alice"], kind, reserved)
    assert applied.status_code == 400 and "name" in applied.json()["fields"]

    # an anonymous policy changes like any other, but cannot be renamed to a reserved name
    policy = world["root"].get(f"{url}?app__code={app}&topic__code=orders").json()["results"][0]
    changed = world["root"].patch(f"{url}{policy['id']}/", {"rate_limit": 5}, format="json")
    assert changed.status_code == 200 and changed.json()["rate_limit"] == 5
    own = world["root"].post(url, {"topic": "orders", "app": "shop"}, format="json").json()
    renamed = world["root"].patch(f"{url}{own['id']}/", {"name": "anonymous.z"}, format="json")
    assert renamed.status_code == 400 and "name" in renamed.json()["fields"]


def test_schema_documents_zbus_open_anonymous_apps_and_errors(world):
    schema = world["alice"].get("/api/schema/?format=json").json()
    components = schema["components"]["schemas"]
    field = components["Topic"]["properties"]["zbus_open"]
    assert field["type"] == "boolean" and field["readOnly"] is True
    assert "token-less zbus clients" in field["description"]
    assert components["App"]["properties"]["is_anonymous"]["readOnly"] is True
    assert set(components["ApiError"]["required"]) == {"error", "message"}
    paths = schema["paths"]
    operations = {
        ("/api/v1/apps/{code}/rotate-token/", "post"): {"200", "400", "401", "403", "404"},
        ("/api/v1/apps/", "post"): {"201", "400", "401", "403", "409", "415"},
        ("/api/v1/producer-policies/", "post"): {"201", "400", "401", "403", "409", "415"},
        ("/api/v1/consumer-policies/{id}/", "patch"): {
            "200",
            "400",
            "401",
            "403",
            "404",
            "409",
            "415",
        },
    }
    for (path, method), codes in operations.items():
        responses = paths[path][method]["responses"]
        assert set(responses) == codes, (path, method)
        error = responses["400"]["content"]["application/json"]["schema"]
        assert error == {"$ref": "#/components/schemas/ApiError"}
