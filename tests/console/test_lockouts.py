"""Failed logins are throttled per username and per address, audited, and unlockable by a
platform admin."""

from __future__ import annotations

import pytest

from mqcloud.approvals.models import AuditEvent

pytestmark = pytest.mark.django_db
PASSWORD = "pw-Secret-123"


def login(client, username: str, password: str, address: str = "10.0.0.1"):
    return client.post("/login/", {"username": username, "password": password}, REMOTE_ADDR=address)


def test_five_failures_lock_the_user_even_with_the_right_password(client, world, settings):
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        assert login(client, "alice", "wrong").status_code == 200
    locked = login(client, "alice", "wrong")
    assert locked.status_code == 429 and "Too many failed logins" in locked.content.decode()
    assert login(client, "alice", PASSWORD).status_code == 429
    assert login(client, "alice", PASSWORD, address="10.9.9.9").status_code == 429
    assert AuditEvent.objects.filter(action="login-failed", target="user:alice").count() >= 5
    event = AuditEvent.objects.filter(action="login-locked-out").first()
    assert event.detail["username"] == "alice" and "password" not in str(event.detail)


def test_one_address_guessing_many_users_is_locked(client, world, settings):
    for n in range(settings.AXES_FAILURE_LIMIT):
        login(client, f"nobody{n}", "wrong", address="10.6.6.6")
    assert login(client, "bob", PASSWORD, address="10.6.6.6").status_code == 429
    assert login(client, "bob", PASSWORD, address="10.7.7.7").status_code == 302


def test_admin_sees_and_unlocks(client, world, settings):
    for _ in range(settings.AXES_FAILURE_LIMIT):
        login(client, "alice", "wrong")
    client.force_login(world.bob)  # (logging alice in would reset her failures)
    assert client.get("/lockouts/").status_code == 403
    client.force_login(world.root)
    page = client.get("/lockouts/")
    assert "locked" in page.content.decode()
    attempt = page.context["listing"].rows[0]
    assert client.post(f"/lockouts/{attempt.pk}/unlock/").status_code == 302
    assert AuditEvent.objects.filter(action="login-unlocked", actor=world.root).exists()
    assert "login-locked-out" in client.get("/audit/").content.decode()
    client.logout()
    assert login(client, "alice", PASSWORD).status_code == 302
