"""Applications: submit → approve (executes) / reject / cancel, auto-approval, freeze, audit."""

from __future__ import annotations

import pytest
from django.core import mail
from rest_framework.test import APIClient

from brokers.models import ConsumerPolicy, ProducerPolicy, Team, Topic
from mqcloud.approvals.models import Application, ApprovalSettings, AuditEvent, Notification
from tests import factories

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def world():
    red, blue = Team.objects.create(name="red"), Team.objects.create(name="blue")
    cluster = factories.cluster_with_brokers()
    w = {
        "red": red,
        "blue": blue,
        "alice": factories.user("alice", team=red),
        "bob": factories.user("bob", team=blue),
        "root": factories.user("root", admin=True),
        "blue_topic": factories.topic("blue-topic", cluster, blue),
    }
    w["red_app"], _ = factories.app("red-app", red)
    return w


def client_for(user) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {factories.token_for(user)}")
    return client


def apply(client: APIClient, kind: str, payload: dict):
    return client.post("/api/v1/applications/", {"kind": kind, "payload": payload}, format="json")


TOPIC = {"code": "orders", "cluster": "c1", "team": "red", "partitions": 4, "partition_groups": 2}


def test_topic_application_approved_creates_topic_and_notifies(world):
    alice, root = client_for(world["alice"]), client_for(world["root"])
    response = apply(alice, "topic_create", TOPIC)
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["status"] == "pending" and body["target"] == "topic:orders"
    assert not Topic.objects.filter(code="orders").exists()

    approved = root.post(f"/api/v1/applications/{body['id']}/approve/")
    assert approved.status_code == 200
    assert approved.json()["status"] == "approved"
    assert approved.json()["decided_by"] == "root"
    topic = Topic.objects.get(code="orders")
    assert topic.team == world["red"] and topic.groups.count() == 2
    assert topic.creator == "alice"

    notices = client_for(world["alice"]).get("/api/v1/notifications/").json()["results"]
    assert "approved" in notices[0]["message"]
    assert len(mail.outbox) == 1 and mail.outbox[0].to == ["alice@example.test"]
    actions = list(
        AuditEvent.objects.filter(target="topic:orders")
        .order_by("id")
        .values_list("action", flat=True)
    )
    assert actions == ["submitted", "approved", "executed"]


def test_invalid_payload_rejected_at_submission(world):
    alice = client_for(world["alice"])
    response = apply(alice, "topic_create", TOPIC | {"partitions": 0})
    assert response.status_code == 400
    assert "partitions" in response.json()["fields"]
    response = apply(alice, "topic_create", TOPIC | {"team": "blue"})
    assert response.status_code == 400 and "team" in response.json()["fields"]
    response = apply(alice, "warp_drive", {})
    assert response.status_code == 400 and "kind" in response.json()["fields"]
    response = apply(alice, "pause", ["not", "an", "object"])
    assert response.status_code == 400 and "payload" in response.json()["fields"]
    assert Application.objects.count() == 0


def test_one_open_application_per_target(world):
    alice = client_for(world["alice"])
    assert apply(alice, "topic_create", TOPIC).status_code == 201
    again = apply(alice, "topic_create", TOPIC)
    assert again.status_code == 400
    assert "open application" in again.json()["fields"]["target"][0]


def test_reject_needs_reason_and_admin(world):
    alice, root = client_for(world["alice"]), client_for(world["root"])
    app_id = apply(alice, "topic_create", TOPIC).json()["id"]
    assert alice.post(f"/api/v1/applications/{app_id}/approve/").status_code == 403
    assert root.post(f"/api/v1/applications/{app_id}/reject/", {}).status_code == 400
    response = root.post(f"/api/v1/applications/{app_id}/reject/", {"reason": "name it better"})
    assert response.status_code == 200 and response.json()["status"] == "rejected"
    assert "name it better" in Notification.objects.get(user=world["alice"]).message
    assert root.post(f"/api/v1/applications/{app_id}/approve/").status_code == 403
    assert not Topic.objects.filter(code="orders").exists()


def test_cancel_by_applicant_only(world):
    alice, bob = client_for(world["alice"]), client_for(world["bob"])
    app_id = apply(alice, "topic_create", TOPIC).json()["id"]
    assert bob.post(f"/api/v1/applications/{app_id}/cancel/").status_code == 404  # other team
    response = alice.post(f"/api/v1/applications/{app_id}/cancel/")
    assert response.status_code == 200 and response.json()["status"] == "cancelled"
    assert apply(alice, "topic_create", TOPIC).status_code == 201  # target free again


def test_consumer_on_other_teams_topic_then_pause_auto_approved(world):
    alice, root = client_for(world["alice"]), client_for(world["root"])
    app_id = apply(
        alice, "consumer_create", {"topic": "blue-topic", "app": "red-app", "http_enabled": True}
    ).json()["id"]
    root.post(f"/api/v1/applications/{app_id}/approve/")
    assert ConsumerPolicy.objects.get(name="red-app.blue-topic").http_enabled

    settings = root.patch(
        "/api/v1/approval-settings/", {"auto_approve": ["pause", "resume"]}, format="json"
    )
    assert settings.status_code == 200
    response = apply(alice, "pause", {"consumer": "red-app.blue-topic"})
    assert response.json()["status"] == "approved" and response.json()["auto_approved"]
    assert ConsumerPolicy.objects.get(name="red-app.blue-topic").paused
    apply(alice, "resume", {"consumer": "red-app.blue-topic"})
    assert not ConsumerPolicy.objects.get(name="red-app.blue-topic").paused


def test_what_approval_would_refuse_is_refused_at_submission(world):
    """A second consumer of one app on one topic is 409 when asked for; a payload value
    of the wrong JSON type is 400 (the README's rule), not coerced ("0" for a number, a
    number for a text) into an application that approval would then fail."""
    alice, root = client_for(world["alice"]), client_for(world["root"])
    first = apply(alice, "consumer_create", {"topic": "blue-topic", "app": "red-app"})
    root.post(f"/api/v1/applications/{first.json()['id']}/approve/")
    again = apply(alice, "consumer_create", {"topic": "blue-topic", "app": "red-app"})
    assert again.status_code == 409, again.json()
    for payload in (
        {"consumer": "red-app.blue-topic", "position": "timestamp", "timestamp_ms": "0"},
        {"consumer": "red-app.blue-topic", "position": "earliest", "client_id": 1e308},
    ):
        response = apply(alice, "offset_reset", payload)
        assert response.status_code == 400, response.json()
    assert Application.objects.filter(status="pending").count() == 0


def test_members_cannot_touch_other_teams_consumers(world):
    root = client_for(world["root"])
    ProducerPolicy.objects.create(topic=world["blue_topic"], app=world["red_app"])
    bob = client_for(world["bob"])
    response = apply(bob, "producer_delete", {"name": "red-app.blue-topic"})
    assert response.status_code == 400 and "name" in response.json()["fields"]
    assert root.get("/api/v1/approval-settings/").status_code == 200
    assert (
        bob.patch("/api/v1/approval-settings/", {"frozen": True}, format="json").status_code == 403
    )


def test_freeze_stops_approvals(world):
    alice, root = client_for(world["alice"]), client_for(world["root"])
    ApprovalSettings.objects.update_or_create(
        id=1, defaults={"frozen": True, "auto_approve": ["topic_create"]}
    )
    app_id = apply(alice, "topic_create", TOPIC).json()["id"]
    assert Application.objects.get(id=app_id).status == "pending"  # no auto-approval
    response = root.post(f"/api/v1/applications/{app_id}/approve/")
    assert response.status_code == 403 and "frozen" in response.json()["message"]


def test_execution_failure_is_reported_not_applied(world):
    alice, root = client_for(world["alice"]), client_for(world["root"])
    app_id = apply(alice, "topic_create", TOPIC).json()["id"]
    # Meanwhile an admin creates the same topic directly.
    root.post("/api/v1/topics/", TOPIC, format="json")
    response = root.post(f"/api/v1/applications/{app_id}/approve/")
    assert response.json()["status"] == "failed"
    assert "code" in response.json()["error"]
    assert "failed" in Notification.objects.get(user=world["alice"]).message
    assert Topic.objects.filter(code="orders").count() == 1


def test_topic_delete_refused_while_in_use(world):
    root = client_for(world["root"])
    bob = client_for(world["bob"])
    ConsumerPolicy.objects.create(topic=world["blue_topic"], app=world["red_app"])
    app_id = apply(bob, "topic_delete", {"code": "blue-topic"}).json()["id"]
    response = root.post(f"/api/v1/applications/{app_id}/approve/")
    assert response.json()["status"] == "failed"
    assert "still has 1" in response.json()["error"]
    assert Topic.objects.filter(code="blue-topic").exists()


def test_visibility_and_audit_scoping(world):
    alice, bob = client_for(world["alice"]), client_for(world["bob"])
    apply(alice, "topic_create", TOPIC)
    assert bob.get("/api/v1/applications/").json()["count"] == 0
    assert alice.get("/api/v1/applications/").json()["count"] == 1
    assert bob.get("/api/v1/audit-events/").json()["count"] == 0
    assert alice.get("/api/v1/audit-events/").json()["count"] == 1
    marked = alice.post("/api/v1/notifications/mark-all-read/")
    assert marked.status_code == 200


def test_a_zbus_token_is_never_stored_or_shown_in_clear(world):
    """The token of a topic application was kept in the payload and the audit trail in
    clear text, and shown to the team by the console and the API."""
    from brokers.engine import hash_token

    alice, root = client_for(world["alice"]), client_for(world["root"])
    created = apply(alice, "topic_create", {**TOPIC, "zbus_token": "s3cret"})
    assert created.status_code == 201, created.json()
    assert created.json()["payload"]["zbus_token"] == "(set)"
    stored = Application.objects.get(pk=created.json()["id"])
    assert "s3cret" not in str(stored.payload)
    assert stored.payload["zbus_token_hash"] == hash_token("s3cret")
    approved = root.post(f"/api/v1/applications/{stored.pk}/approve/").json()
    assert approved["status"] == "approved", approved
    assert Topic.objects.get(code="orders").zbus_token_hash == hash_token("s3cret")

    cleared = apply(alice, "topic_update", {"code": "orders", "changes": {"zbus_token": ""}})
    root.post(f"/api/v1/applications/{cleared.json()['id']}/approve/")
    assert Topic.objects.get(code="orders").zbus_token_hash == ""
    forged = apply(alice, "topic_update", {"code": "orders", "changes": {"zbus_token_hash": "x"}})
    assert forged.status_code == 400

    root.post("/api/v1/topics/", {**TOPIC, "code": "direct", "zbus_token": "0ther"}, format="json")
    shown = str(alice.get("/api/v1/audit-events/?limit=100").json())
    shown += str(root.get("/api/v1/audit-events/?limit=100").json())
    shown += str(alice.get("/api/v1/applications/").json())
    shown += str(list(AuditEvent.objects.values_list("detail", flat=True)))
    assert "s3cret" not in shown and "0ther" not in shown
    assert hash_token("s3cret") not in shown


def test_the_migration_seals_stored_tokens_and_redacts_the_trail(world):
    import importlib

    from django.apps import apps

    from brokers.engine import hash_token

    migration = importlib.import_module("mqcloud.approvals.migrations.0006_seal_zbus_tokens")
    pending = Application.objects.create(
        kind="topic_update",
        applicant=world["alice"],
        team=world["red"],
        payload={"code": "blue-topic", "changes": {"zbus_token": "old-secret"}},
        target="topic:blue-topic",
    )
    event = AuditEvent.objects.create(
        action="submitted", target="topic:x", detail={"payload": {"zbus_token": "old-secret"}}
    )
    migration.forwards(apps, None)
    pending.refresh_from_db()
    event.refresh_from_db()
    assert pending.payload["changes"] == {"zbus_token_hash": hash_token("old-secret")}
    assert event.detail == {"payload": {"zbus_token": "(set)"}}


@pytest.mark.parametrize("field", ["send_limit", "send_back_limit"])
def test_a_topics_limits_are_set_and_changed_by_application(world, field):
    """console-features "broker-side per-topic send limit, and … for consumer send-back,
    edited live": set when the topic is applied for, changed by a topic_update, and in
    the catalog the engine reads."""
    from brokers.catalog_loader import build_snapshot

    alice, root = client_for(world["alice"]), client_for(world["root"])
    made = apply(alice, "topic_create", {**TOPIC, field: 2000})
    root.post(f"/api/v1/applications/{made.json()['id']}/approve/")
    assert getattr(Topic.objects.get(code="orders"), field) == 2000
    assert (
        apply(alice, "topic_update", {"code": "orders", "changes": {field: 0}}).status_code == 400
    )
    changed = apply(alice, "topic_update", {"code": "orders", "changes": {field: 150}})
    root.post(f"/api/v1/applications/{changed.json()['id']}/approve/")
    assert getattr(Topic.objects.get(code="orders"), field) == 150
    assert getattr(build_snapshot().topics["orders"], field) == 150
    lifted = apply(alice, "topic_update", {"code": "orders", "changes": {field: None}})
    root.post(f"/api/v1/applications/{lifted.json()['id']}/approve/")
    assert getattr(build_snapshot().topics["orders"], field) is None
