"""REST API: authentication, team scoping, admin-only writes, validation error bodies."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from brokers.models import App, ConsumerPolicy, Team, Topic
from tests import factories

pytestmark = pytest.mark.django_db


@pytest.fixture
def world():
    """Two teams with a member each, an admin, a cluster, a topic and an app per team."""
    red, blue = Team.objects.create(name="red"), Team.objects.create(name="blue")
    cluster = factories.cluster_with_brokers()
    w = {
        "red": red,
        "blue": blue,
        "cluster": cluster,
        "alice": factories.user("alice", team=red),
        "bob": factories.user("bob", team=blue),
        "root": factories.user("root", admin=True),
        "red_topic": factories.topic("red-topic", cluster, red),
        "blue_topic": factories.topic("blue-topic", cluster, blue),
    }
    w["red_app"], w["red_app_token"] = factories.app("red-app", red)
    w["blue_app"], _ = factories.app("blue-app", blue)
    return w


def client_for(user) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {factories.token_for(user)}")
    return client


def test_anonymous_gets_401_with_json_body(world):
    response = APIClient().get("/api/v1/topics/")
    assert response.status_code == 401
    assert response.json()["error"] == "not_authenticated"
    assert response["WWW-Authenticate"] == "Bearer"


@pytest.mark.parametrize("header", ["Token nope", "Bearer nope", "Token a b", "Bearer"])
def test_bad_tokens_rejected(world, header):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=header)
    response = client.get("/api/v1/topics/")
    assert response.status_code == 401
    assert response.json()["message"]


def test_bearer_and_token_schemes_and_session(world):
    token = factories.token_for(world["alice"])
    for scheme in ("Token", "Bearer"):
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"{scheme} {token}")
        assert client.get("/api/v1/topics/").status_code == 200
    session = APIClient()
    session.force_login(world["alice"])
    assert session.get("/api/v1/topics/").status_code == 200


def test_inactive_user_token_rejected(world):
    client = client_for(world["alice"])
    world["alice"].is_active = False
    world["alice"].save()
    assert client.get("/api/v1/topics/").status_code == 401


def test_member_sees_only_own_team(world):
    alice = client_for(world["alice"])
    codes = [t["code"] for t in alice.get("/api/v1/topics/").json()["results"]]
    assert codes == ["red-topic"]
    assert alice.get("/api/v1/topics/blue-topic/").status_code == 404
    assert alice.delete("/api/v1/topics/blue-topic/").status_code == 403  # members apply
    apps = [a["code"] for a in alice.get("/api/v1/apps/").json()["results"]]
    assert apps == ["red-app"]
    assert [t["name"] for t in alice.get("/api/v1/teams/").json()["results"]] == ["red"]


def test_admin_sees_everything(world):
    root = client_for(world["root"])
    codes = {t["code"] for t in root.get("/api/v1/topics/").json()["results"]}
    assert codes == {"red-topic", "blue-topic"}


@pytest.mark.parametrize(
    ("method", "url", "payload"),
    [
        ("post", "/api/v1/topics/", {"code": "mine", "cluster": "c1", "team": "red"}),
        ("patch", "/api/v1/topics/red-topic/", {"description": "x"}),
        ("delete", "/api/v1/topics/red-topic/", None),
        ("post", "/api/v1/consumer-policies/", {"topic": "red-topic", "app": "red-app"}),
        ("post", "/api/v1/producer-policies/", {"topic": "red-topic", "app": "red-app"}),
    ],
)
def test_members_change_the_cluster_only_through_applications(world, method, url, payload):
    alice = client_for(world["alice"])
    response = getattr(alice, method)(url, payload, format="json")
    assert response.status_code == 403
    assert "/api/v1/applications/" in response.json()["message"]
    assert Topic.objects.filter(code="red-topic").exists()
    assert not Topic.objects.filter(code="mine").exists()


def test_admin_topic_team_must_exist(world):
    root = client_for(world["root"])
    response = root.post(
        "/api/v1/topics/", {"code": "sneaky", "cluster": "c1", "team": "nope"}, format="json"
    )
    assert response.status_code == 400
    body = response.json()
    assert body["error"] == "invalid"
    assert "team" in body["fields"]
    assert not Topic.objects.filter(code="sneaky").exists()


def test_admin_writes_are_audited(world):
    from mqcloud.approvals.models import AuditEvent

    root = client_for(world["root"])
    root.patch("/api/v1/topics/red-topic/", {"description": "d"}, format="json")
    event = AuditEvent.objects.get(action="topic-updated")
    assert event.actor == world["root"] and event.target == "topic:red-topic"
    assert event.team == world["red"]


def test_create_topic_lays_out_groups(world):
    alice = client_for(world["root"])
    response = alice.post(
        "/api/v1/topics/",
        {"code": "orders", "cluster": "c1", "team": "red", "partitions": 6, "partition_groups": 3},
        format="json",
    )
    assert response.status_code == 201, response.json()
    body = response.json()
    assert [g["partitions"] for g in body["groups"]] == [[0, 1], [2, 3], [4, 5]]
    assert {g["leader"] for g in body["groups"]} == {1, 2}
    assert body["creator"] == "root"


def test_topic_validation_errors_name_the_field(world):
    alice = client_for(world["root"])
    cases = [
        ({"code": "bad code", "cluster": "c1", "team": "red"}, "code"),
        ({"code": "x", "cluster": "nope", "team": "red"}, "cluster"),
        ({"code": "x", "cluster": "c1", "team": "red", "partitions": 0}, "partitions"),
        (
            {"code": "x", "cluster": "c1", "team": "red", "partitions": 2, "partition_groups": 3},
            "partition_groups",
        ),
        (
            {"code": "x", "cluster": "c1", "team": "red", "overflow_policy": "RedirectToDlq"},
            "dead_letter_enabled",
        ),
    ]
    for payload, field in cases:
        response = alice.post("/api/v1/topics/", payload, format="json")
        assert response.status_code == 400, (payload, response.content)
        body = response.json()
        assert field in body["fields"], (payload, body)
        assert body["message"].startswith(field)
    # a code another topic has is a conflict with the current state, not invalid input
    taken = alice.post(
        "/api/v1/topics/", {"code": "red-topic", "cluster": "c1", "team": "red"}, format="json"
    )
    assert taken.status_code == 409, taken.content
    assert taken.json()["error"] == "conflict" and taken.json()["message"].startswith("code")


def test_topic_partitions_are_frozen_after_creation(world):
    """Read-only on update (as the schema says): a value sent is ignored."""
    alice = client_for(world["root"])
    before = Topic.objects.get(code="red-topic").partitions
    response = alice.patch(
        "/api/v1/topics/red-topic/", {"partitions": before + 4, "code": "x"}, format="json"
    )
    assert response.status_code == 200
    assert response.json()["partitions"] == before and response.json()["code"] == "red-topic"
    assert Topic.objects.get(code="red-topic").partitions == before
    response = alice.patch(
        "/api/v1/topics/red-topic/", {"retention_max_count": 1000}, format="json"
    )
    assert response.status_code == 200
    assert response.json()["retention_max_count"] == 1000


def test_zbus_token_is_write_only(world):
    alice = client_for(world["root"])
    response = alice.patch("/api/v1/topics/red-topic/", {"zbus_token": "s3cret"}, format="json")
    assert response.status_code == 200
    assert "zbus_token" not in response.json()
    assert response.json()["zbus_token_set"] is True
    assert "s3cret" not in str(Topic.objects.filter(code="red-topic").values())


def test_clusters_and_brokers_admin_writes_only(world):
    alice = client_for(world["alice"])
    assert alice.get("/api/v1/brokers/").status_code == 200
    response = alice.post("/api/v1/clusters/", {"name": "mine"}, format="json")
    assert response.status_code == 403
    assert response.json()["error"] == "permission_denied"
    root = client_for(world["root"])
    assert root.post("/api/v1/clusters/", {"name": "c2"}, format="json").status_code == 201
    response = root.post(
        "/api/v1/brokers/",
        {
            "id": 7,
            "cluster": "c2",
            "host": "10.0.0.7",
            "jmq4_port": 1,
            "zbus_port": 1,
            "vibemq_port": 3,
        },
        format="json",
    )
    assert response.status_code == 400
    assert "must differ" in response.json()["message"]
    response = root.post(
        "/api/v1/brokers/",
        {"id": 7, "cluster": "c2", "host": "10.0.0.7", "jmq4_port": 70000},
        format="json",
    )
    assert "jmq4_port" in response.json()["fields"]


def test_app_token_shown_once_and_rotated(world):
    alice = client_for(world["alice"])  # a member: reads, but tokens are a team admin's
    before = App.objects.get(code="red-app").active_token_hashes()
    denied = alice.post("/api/v1/apps/", {"code": "new-app", "team": "red"}, format="json")
    assert denied.status_code == 403
    assert alice.post("/api/v1/apps/red-app/rotate-token/").status_code == 403
    assert alice.delete("/api/v1/apps/red-app/").status_code == 403
    assert alice.get("/api/v1/apps/red-app/").status_code == 200
    assert App.objects.get(code="red-app").active_token_hashes() == before  # still valid
    alice = client_for(factories.user("ada", team=world["red"], role="admin"))
    response = alice.post("/api/v1/apps/", {"code": "new-app", "team": "red"}, format="json")
    assert response.status_code == 201
    token = response.json()["token"]
    assert token and token.startswith("mqa_")
    shown = alice.get("/api/v1/apps/new-app/").json()
    assert shown["token"] is None
    assert shown["token_hints"] == [f"…{token[-4:]}"]
    rotated = alice.post("/api/v1/apps/new-app/rotate-token/").json()["token"]
    assert rotated != token
    app = App.objects.get(code="new-app")
    assert len(app.active_token_hashes()) == 1


def test_member_cannot_make_admin_app(world):
    alice = client_for(world["alice"])
    response = alice.post(
        "/api/v1/apps/", {"code": "boss", "team": "red", "is_admin": True}, format="json"
    )
    assert response.status_code == 400
    assert "is_admin" in response.json()["fields"]


def test_policies_scoped_by_app_team(world):
    root = client_for(world["root"])
    response = root.post(
        "/api/v1/consumer-policies/",
        {"topic": "blue-topic", "app": "red-app", "http_enabled": True},
        format="json",
    )
    assert response.status_code == 201, response.json()
    assert response.json()["name"] == "red-app.blue-topic"
    alice = client_for(world["alice"])
    assert alice.get("/api/v1/consumer-policies/").json()["count"] == 1
    bob = client_for(world["bob"])
    assert bob.get("/api/v1/consumer-policies/").json()["count"] == 0
    dup = root.post(
        "/api/v1/consumer-policies/", {"topic": "blue-topic", "app": "red-app"}, format="json"
    )
    assert dup.status_code == 409  # red-app already has a consumer on blue-topic
    assert dup.json()["error"] == "conflict" and "topic, app" in dup.json()["message"]
    assert ConsumerPolicy.objects.count() == 1


def test_policy_field_validation(world):
    alice = client_for(world["root"])
    response = alice.post(
        "/api/v1/consumer-policies/",
        {"topic": "red-topic", "app": "red-app", "batch_size": 0, "blacklist": ["x"]},
        format="json",
    )
    assert response.status_code == 400
    assert {"batch_size", "blacklist"} <= set(response.json()["fields"])
    response = alice.post(
        "/api/v1/producer-policies/",
        {"topic": "red-topic", "app": "red-app", "weights": {"1": 5, "42": 1}},
        format="json",
    )
    assert response.status_code == 400
    assert "42" in response.json()["fields"]["weights"][0]


def test_pagination_and_filtering(world):
    root = client_for(world["root"])
    page = root.get("/api/v1/topics/?limit=1").json()
    assert page["count"] == 2 and len(page["results"]) == 1 and page["next"]
    only = root.get("/api/v1/topics/?team__name=blue").json()
    assert [t["code"] for t in only["results"]] == ["blue-topic"]
    searched = root.get("/api/v1/topics/?search=red").json()
    assert [t["code"] for t in searched["results"]] == ["red-topic"]


def test_malformed_json_gets_400(world):
    alice = client_for(world["alice"])
    response = alice.post("/api/v1/apps/", "{not json", content_type="application/json")
    assert response.status_code == 400
    assert response.json()["error"] == "parse_error"


@pytest.mark.parametrize(
    ("method", "url", "body"),
    [
        ("post", "/api/v1/applications/", "[" * 2000 + "]" * 2000),  # RecursionError
        (
            "post",
            "/api/v1/applications/",
            '{"kind": "pause", "payload": ' + "[" * 70 + "]" * 70 + "}",
        ),
        ("post", "/api/v1/applications/", '{"kind": "\\ud800", "payload": {}}'),
        ("post", "/api/v1/applications/", '{"kind": "pause", "payload": {"consumer": "\\udfff"}}'),
        ("patch", "/api/v1/topics/red-topic/", '{"type": "\\ud800"}'),
        ("post", "/api/v1/apps/", '{"\\ud800": 1}'),
    ],
)
def test_bodies_no_response_could_carry_get_400(world, method, url, body):
    """A body nested past 64 levels or holding a lone surrogate is a 400 parse_error:
    the standard decoder raised RecursionError, and a choice field echoing a surrogate
    failed to render (both were 500s)."""
    root = client_for(world["root"])
    response = getattr(root, method)(url, body, content_type="application/json")
    assert response.status_code == 400, response.content
    assert response.json()["error"] == "parse_error"


def test_an_object_not_found_says_not_found(world):
    alice = client_for(world["alice"])
    for url in ("/api/v1/apps/nonexistent/", "/api/v1/topics/blue-topic/"):
        response = alice.get(url)
        assert response.status_code == 404
        assert response.json()["error"] == "not_found", url


@pytest.mark.parametrize(
    "query",
    ["paused=maybe", "paused=null", "paused=true&paused=false", "nosuch=1"],
)
def test_list_query_parameters_are_checked_as_given(query):
    client = client_for(factories.user("root", admin=True))
    response = client.get(f"/api/v1/consumer-policies/?{query}")
    assert response.status_code == 400, query
    assert response.json()["error"] == "invalid"


def test_audit_events_filter_by_any_application_id():
    client = client_for(factories.user("root", admin=True))
    response = client.get("/api/v1/audit-events/?application=987654")
    assert response.status_code == 200 and response.json()["results"] == []


def test_request_bodies_are_json_only():
    client = client_for(factories.user("root", admin=True))
    response = client.post("/api/v1/clusters/", {"name": "c9"}, format="multipart")
    assert response.status_code == 415
    assert response.json()["error"] == "unsupported_media_type"
