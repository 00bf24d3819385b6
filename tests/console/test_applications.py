"""Application forms (inline errors), the admin queue, decisions, apps and tokens, CSRF."""

from __future__ import annotations

import pytest
from django.test import Client

from brokers.models import App, AppToken, ConsumerPolicy, ProducerPolicy
from mqcloud.approvals.models import Application, AuditEvent, Kind, Notification

pytestmark = pytest.mark.django_db


def test_every_kind_has_a_form(client, world):
    client.force_login(world.alice)
    for kind in Kind.values:
        response = client.get("/applications/new/", {"kind": kind})
        assert response.status_code == 200 and response.context["form"].kind == kind, kind


def test_topic_application_form_errors_inline(client, world):
    client.force_login(world.alice)
    missing = client.post("/applications/new/", {"kind": "topic_create", "cluster": "c1"})
    assert missing.status_code == 200
    assert "code" in missing.context["form"].errors
    assert 'role="alert"' in missing.content.decode()
    taken = client.post(
        "/applications/new/",
        {"kind": "topic_create", "code": "orders", "team": "red", "cluster": "c1",
         "type": "normal", "partitions": 4},
    )  # fmt: skip
    assert "already exists" in str(taken.context["form"].errors["code"])
    foreign = client.post(
        "/applications/new/",
        {"kind": "topic_create", "code": "x1", "team": "blue", "cluster": "c1",
         "type": "normal", "partitions": 4},
    )  # fmt: skip
    assert "team" in foreign.context["form"].errors
    assert not Application.objects.exists()


def test_apply_approve_and_see_the_topic(client, world):
    client.force_login(world.alice)
    filed = client.post(
        "/applications/new/",
        {"kind": "topic_create", "code": "payments", "team": "red", "cluster": "c1",
         "type": "normal", "partitions": 2, "send_back_limit": 100},
    )  # fmt: skip
    app = Application.objects.get()
    assert filed["Location"] == f"/applications/{app.pk}/"
    mine = client.get("/applications/").content.decode()
    assert f"#{app.pk}" in mine and "Pending" in mine
    assert client.post(f"/applications/{app.pk}/approve/").status_code == 403
    client.force_login(world.root)
    queue = client.get("/applications/queue/").content.decode()
    assert "payments" in queue
    client.post(f"/applications/{app.pk}/approve/", {"next": "queue"})
    app.refresh_from_db()
    assert app.status == "approved" and app.decided_by == world.root
    client.force_login(world.alice)
    assert "payments" in client.get("/topics/").content.decode()
    page = client.get("/topics/payments/").content.decode()
    assert 'data-send-back-limit="100"' in page and "no send limit" in page
    assert Notification.objects.filter(user=world.alice, read=False).count() == 1
    assert "Notices <mark>1</mark>" in client.get("/").content.decode()
    client.post("/notifications/read/")
    assert not Notification.objects.filter(user=world.alice, read=False).exists()
    audit = client.get("/audit/").content.decode()
    assert "approved" in audit and "submitted" in audit


def test_reject_needs_a_reason_and_cancel(client, world):
    client.force_login(world.alice)
    client.post("/applications/new/", {"kind": "pause", "consumer": "shop.orders"})
    app = Application.objects.get()
    client.force_login(world.root)
    no_reason = client.post(f"/applications/{app.pk}/reject/", {"reason": ""})
    assert no_reason.status_code == 400 and "reason" in no_reason.context["reject_form"].errors
    client.post(f"/applications/{app.pk}/reject/", {"reason": "not during the sale"})
    app.refresh_from_db()
    assert app.status == "rejected" and app.reason == "not during the sale"
    client.force_login(world.alice)
    client.post("/applications/new/", {"kind": "resume", "consumer": "shop.orders"})
    second = Application.objects.get(kind="resume")
    client.force_login(world.bob)
    assert client.post(f"/applications/{second.pk}/cancel/").status_code == 404
    client.force_login(world.alice)
    client.post(f"/applications/{second.pk}/cancel/")
    second.refresh_from_db()
    assert second.status == "cancelled"


def test_one_open_application_per_consumer(client, world):
    client.force_login(world.alice)
    client.post("/applications/new/", {"kind": "pause", "consumer": "shop.orders"})
    again = client.post(
        "/applications/new/", {"kind": "rate_limit", "consumer": "shop.orders", "rate_limit": 5}
    )
    assert "already has an open application" in again.content.decode()


def test_offset_reset_form_validates_and_queues_with_progress(client, world):
    client.force_login(world.alice)
    bad = client.post(
        "/applications/new/",
        {"kind": "offset_reset", "consumer": "shop.orders", "position": "timestamp"},
    )
    assert "timestamp" in bad.context["form"].errors
    bad_time = client.post(
        "/applications/new/",
        {"kind": "offset_reset", "consumer": "shop.orders", "position": "timestamp",
         "timestamp": "31/12/2024"},
    )  # fmt: skip
    assert "YYYY-MM-DD" in str(bad_time.context["form"].errors["timestamp"])
    client.post(
        "/applications/new/",
        {"kind": "offset_reset", "consumer": "shop.orders", "position": "timestamp",
         "timestamp": "2024-12-31 23:59:59.250"},
    )  # fmt: skip
    app = Application.objects.get()
    assert app.payload["timestamp_ms"] == 1735689599250
    client.force_login(world.root)
    client.post(f"/applications/{app.pk}/approve/")
    app.refresh_from_db()
    assert app.result["task_id"]
    page = client.get(f"/applications/{app.pk}/")
    assert 'id="operation-progress"' in page.content.decode()
    partial = client.get(f"/applications/{app.pk}/progress/", HTTP_HX_REQUEST="true")
    text = partial.content.decode()
    assert "<html" not in text and 'hx-trigger="every 1s"' in text  # no worker: still pending
    assert partial.context["progress"]["state"] == "PENDING"


def test_reconsume_form_validates_and_files(client, world, monkeypatch):
    from brokers.engine.sections import pull

    client.force_login(world.alice)
    backwards = client.post(
        "/applications/new/",
        {"kind": "reconsume", "consumer": "shop.orders",
         "start": "2024-12-31 10:00:00.000", "end": "2024-12-31 09:00:00.000"},
    )  # fmt: skip
    assert "end" in backwards.context["form"].errors
    client.post(
        "/applications/new/",
        {"kind": "reconsume", "consumer": "shop.orders",
         "start": "2024-12-31 09:00:00.000", "end": "2024-12-31 10:00:00.000"},
    )  # fmt: skip
    app = Application.objects.get()
    assert app.payload == {
        "consumer": "shop.orders", "from_ms": 1735635600000, "to_ms": 1735639200000,
    }  # fmt: skip
    monkeypatch.setattr(pull, "RECONSUME_MAX", -1)  # any span is too large
    client.force_login(world.root)
    client.post(f"/applications/{app.pk}/approve/")
    app.refresh_from_db()
    assert app.status == "failed" and "re-consumed at once" in app.error


def test_a_member_cannot_apply_for_another_teams_consumer(client, world):
    client.force_login(world.alice)
    response = client.post(
        "/applications/new/", {"kind": "pause", "consumer": world.blue_consumer.name}
    )
    assert "consumer" in response.context["form"].errors
    assert not Application.objects.exists()


def test_blacklist_and_weight_editor_apply_changes(client, world):
    client.force_login(world.alice)
    form = client.get("/applications/new/", {"kind": "producer_update", "name": "shop.orders"})
    assert form.context["form"].initial["weights"] == ""
    bad = client.post(
        "/applications/new/",
        {"kind": "producer_update", "name": "shop.orders", "weights": "9=5", "blacklist": ""},
    )
    assert "Not brokers" in str(bad.context["form"].errors["weights"])
    bad_ip = client.post(
        "/applications/new/",
        {"kind": "producer_update", "name": "shop.orders", "weights": "1=50", "blacklist": "nope"},
    )
    assert "not an IP address" in bad_ip.content.decode()
    client.post(
        "/applications/new/",
        {"kind": "producer_update", "name": "shop.orders", "weights": "1=50\n2=100",
         "blacklist": "10.0.0.0/8", "rate_limit": "250"},
    )  # fmt: skip
    app = Application.objects.get()
    client.force_login(world.root)
    client.post(f"/applications/{app.pk}/approve/")
    producer = ProducerPolicy.objects.get(name="shop.orders")
    assert producer.weights == {"1": 50, "2": 100} and producer.blacklist == ["10.0.0.0/8"]
    assert producer.rate_limit == 250
    client.force_login(world.alice)
    client.post(
        "/applications/new/",
        {"kind": "consumer_update", "name": "shop.orders", "blacklist": "",
         "backlog_alert_enabled": "on", "backlog_alert_count": 50, "backlog_alert_age_s": 60,
         "failure_alert_per_hour": 7},
    )  # fmt: skip
    rule = Application.objects.get(kind="consumer_update")
    client.force_login(world.root)
    client.post(f"/applications/{rule.pk}/approve/")
    consumer = ConsumerPolicy.objects.get(name="shop.orders")
    assert (consumer.backlog_alert_count, consumer.backlog_alert_age_s) == (50, 60)
    assert consumer.failure_alert_per_hour == 7
    alerts = client.get("/alerts/").content.decode()
    assert "≥ 50 messages and older than 60 s" in alerts
    assert "≥ 7 an hour" in alerts


def test_app_token_shown_once_and_rotation_by_team_admin(client, world):
    client.force_login(world.alice)
    assert client.get("/apps/new/").status_code == 403
    assert client.post("/apps/shop/rotate/").status_code == 403
    client.force_login(world.carol)
    created = client.post("/apps/new/", {"code": "billing", "team": "red"})
    token = created.context["token"]
    assert token.startswith("mqa_") and token in created.content.decode()
    assert created["Cache-Control"].startswith("max-age=0")
    assert token not in client.get("/apps/billing/").content.decode()
    rotated = client.post("/apps/billing/rotate/")
    new = rotated.context["token"]
    assert new != token and new in rotated.content.decode()
    app = App.objects.get(code="billing")
    assert AppToken.objects.filter(app=app, revoked_at__isnull=True).count() == 1
    assert AuditEvent.objects.filter(action="app-token-rotated").exists()
    dup = client.post("/apps/new/", {"code": "billing", "team": "red"})
    assert "exists" in str(dup.context["form"].errors["code"])
    blue = client.post("/apps/new/", {"code": "x2", "team": "blue"})
    assert "team" in blue.context["form"].errors


def test_posts_need_a_csrf_token(world):
    csrf = Client(enforce_csrf_checks=True)
    csrf.force_login(world.carol)
    assert csrf.post("/apps/shop/rotate/").status_code == 403
    assert (
        csrf.post("/applications/new/", {"kind": "pause", "consumer": "shop.orders"}).status_code
        == 403
    )
    assert not Application.objects.exists()
