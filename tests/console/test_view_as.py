"""A platform admin views the console as a user (console-features "Admins can switch to a
user's view"): every page and the session's API answer as that user sees them, nothing
can be changed meanwhile (403, nothing stored), starting and leaving are audited; only
platform admins may, and the view ends when they leave it, log out or stop being one."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from brokers.models import Topic
from mqcloud.approvals.models import AuditEvent

pytestmark = pytest.mark.django_db


def topic_codes(client) -> set[str]:
    page = client.get("/topics/").content.decode()
    return {code for code in ("orders", "blue-secret") if f"/topics/{code}/" in page}


def test_an_admin_sees_what_a_user_sees_and_changes_nothing(client, world):
    client.force_login(world.root)
    assert topic_codes(client) == {"orders", "blue-secret"}
    started = client.post(f"/users/{world.alice.pk}/view-as/")
    assert started.status_code == 302 and started["Location"] == "/"
    page = client.get("/").content.decode()
    assert 'id="view-as"' in page and "as <strong>alice</strong>, read-only" in page
    assert topic_codes(client) == {"orders"}
    assert client.get("/topics/blue-secret/").status_code == 404
    assert client.get("/users/").status_code == 403  # alice is no admin
    api = client.get("/api/v1/topics/")
    assert api.status_code == 200 and [t["code"] for t in api.json()["results"]] == ["orders"]

    users_before = get_user_model().objects.count()
    refused = client.post("/users/new/", {"username": "mallory"})
    assert refused.status_code == 403 and "nothing can be changed" in refused.content.decode()
    assert get_user_model().objects.count() == users_before
    refused_api = client.post(
        "/api/v1/topics/",
        {"code": "sneaky", "cluster": "c1", "team": "red"},
        content_type="application/json",
    )
    assert refused_api.status_code == 403 and "viewing as alice" in refused_api.json()["detail"]
    assert not Topic.objects.filter(code="sneaky").exists()
    assert client.post(f"/users/{world.bob.pk}/view-as/").status_code == 403  # no hopping

    left = client.post("/view-as/stop/")
    assert left.status_code == 302 and left["Location"] == "/users/"
    assert topic_codes(client) == {"orders", "blue-secret"}
    assert 'id="view-as"' not in client.get("/").content.decode()
    trail = AuditEvent.objects.filter(actor=world.root).order_by("id")
    assert [(e.action, e.target) for e in trail] == [
        ("view-as-started", "user:alice"),
        ("view-as-ended", "user:alice"),
    ]


def test_only_platform_admins_view_as_others(client, world):
    client.force_login(world.carol)  # a team admin is no platform admin
    assert client.post(f"/users/{world.alice.pk}/view-as/").status_code == 403
    assert 'id="view-as"' not in client.get("/").content.decode()
    client.force_login(world.root)
    assert client.post(f"/users/{world.root.pk}/view-as/").status_code == 403  # oneself
    assert client.post("/users/999999/view-as/").status_code == 404
    assert client.get(f"/users/{world.alice.pk}/view-as/").status_code == 405
    assert not AuditEvent.objects.filter(action="view-as-started").exists()


def test_the_view_ends_with_the_admins_rights_or_session(client, world):
    client.force_login(world.root)
    client.post(f"/users/{world.alice.pk}/view-as/")
    assert topic_codes(client) == {"orders"}
    world.root.is_superuser = world.root.is_staff = False
    world.root.save()
    assert topic_codes(client) == set()  # root's own view now: in no team
    assert 'id="view-as"' not in client.get("/").content.decode()

    world.root.is_superuser = world.root.is_staff = True
    world.root.save()
    client.force_login(world.root)
    client.post(f"/users/{world.bob.pk}/view-as/")
    assert topic_codes(client) == {"blue-secret"}
    assert client.post("/logout/").status_code == 302  # logging out is never refused
    assert client.get("/").status_code == 302  # logged out
    client.force_login(world.root)
    assert topic_codes(client) == {"orders", "blue-secret"}


def test_the_user_list_offers_the_view_for_others_only(client, world):
    client.force_login(world.root)
    page = client.get("/users/").content.decode()
    assert f'formaction="/users/{world.alice.pk}/view-as/"' in page
    assert f'formaction="/users/{world.root.pk}/view-as/"' not in page
