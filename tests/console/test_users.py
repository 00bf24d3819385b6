"""Accounts: platform admins add users and reset passwords (generated, shown once in the
answer, never in the audit trail), switch accounts off and on; anyone registers while
self-registration is on; every user changes its own password."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone

from mqcloud.approvals.models import AuditEvent

pytestmark = pytest.mark.django_db


def logs_in(client, username: str, password: str) -> bool:
    """Through the login page (the lockout backend wants the request)."""
    answer = client.post("/login/", {"username": username, "password": password})
    client.logout()
    return answer.status_code == 302


def shown_password(page) -> str:
    match = re.search(r"is <code>([^<]+)</code>", page.content.decode())
    assert match, page.content.decode()[:3000]
    return match.group(1)


def test_only_platform_admins_manage_accounts(client, world):
    client.force_login(world.carol)  # a team admin, not a platform admin
    assert client.get("/users/").status_code == 403
    assert client.post("/users/new/", {"username": "mallory"}).status_code == 403
    assert client.post(f"/users/{world.alice.pk}/", {"action": "reset-password"}).status_code == 403
    assert 'href="/users/"' not in client.get("/").content.decode()
    assert not get_user_model().objects.filter(username="mallory").exists()


def test_an_added_user_logs_in_with_the_password_shown_once(client, world):
    client.force_login(world.root)
    assert 'href="/users/"' in client.get("/").content.decode()
    added = client.post("/users/new/", {"username": "dave", "email": "dave@example.test"})
    assert added.status_code == 200 and added["Cache-Control"] == "no-store"
    password = shown_password(added)
    assert password not in client.get("/users/").content.decode()  # once
    (event,) = AuditEvent.objects.filter(action="user-added")
    assert password not in str(event.detail) and event.target == "user:dave"
    client.logout()
    assert logs_in(client, "dave", password)
    client.force_login(get_user_model().objects.get(username="dave"))
    assert client.post("/users/new/", {"username": "eve"}).status_code == 403  # no admin


def test_a_reset_password_replaces_the_old_one(client, world):
    client.force_login(world.root)
    reset = client.post(f"/users/{world.alice.pk}/", {"action": "reset-password"})
    password = shown_password(reset)
    assert AuditEvent.objects.filter(action="password-reset", target="user:alice").exists()
    client.logout()
    assert not logs_in(client, "alice", "pw-Secret-123")
    assert logs_in(client, "alice", password)


def test_switching_an_account_off_and_on(client, world):
    client.force_login(world.root)
    client.post(f"/users/{world.bob.pk}/", {"action": "deactivate"})
    world.bob.refresh_from_db()
    assert not world.bob.is_active
    client.post(f"/users/{world.bob.pk}/", {"action": "activate"})
    world.bob.refresh_from_db()
    assert world.bob.is_active
    client.post(f"/users/{world.root.pk}/", {"action": "deactivate"})  # not oneself
    world.root.refresh_from_db()
    assert world.root.is_active
    assert client.post("/users/999999/", {"action": "activate"}).status_code == 404
    assert client.post(f"/users/{world.bob.pk}/", {"action": "delete"}).status_code == 302
    assert client.get(f"/users/{world.bob.pk}/").status_code == 405


@pytest.mark.parametrize("username", ["", "a b", "x" * 151, "alice", "n\x00ll"])
def test_bad_new_users_are_refused(client, world, username):
    client.force_login(world.root)
    before = get_user_model().objects.count()
    answer = client.post("/users/new/", {"username": username}, follow=True)
    assert answer.status_code == 200 and get_user_model().objects.count() == before


def test_self_registration_and_its_switch(client, world, settings):
    settings.SELF_REGISTRATION = True
    assert 'href="/signup/"' in client.get("/login/").content.decode()
    weak = client.post("/signup/", {"username": "erin", "password1": "123", "password2": "123"})
    assert weak.status_code == 200 and weak.context["form"].errors
    made = client.post(
        "/signup/",
        {
            "username": "erin",
            "email": "",
            "password1": "long-Secret-789",
            "password2": "long-Secret-789",
        },
    )
    assert made.status_code == 302 and made["Location"] == "/teams/"
    assert client.get("/teams/").context["rows"] == []  # in no team yet
    assert AuditEvent.objects.filter(action="user-registered", target="user:erin").exists()
    client.logout()
    settings.SELF_REGISTRATION = False
    assert client.get("/signup/").status_code == 404
    assert 'href="/signup/"' not in client.get("/login/").content.decode()


def test_registration_is_limited_per_address(client, world, settings):
    """A script registering accounts from one address is stopped at the hourly limit,
    with the form's own message and 429; another address still registers; 0 lifts it."""
    settings.SELF_REGISTRATION, settings.SIGNUP_LIMIT_PER_HOUR = True, 2

    def register(name: str, address: str = "203.0.113.7"):
        client.logout()
        form = {"username": name, "email": "", "password1": "long-Secret-789"}
        form["password2"] = form["password1"]
        return client.post("/signup/", form, REMOTE_ADDR=address)

    assert register("bot1").status_code == 302
    assert register("bot2").status_code == 302
    refused = register("bot3")
    assert refused.status_code == 429
    assert "Too many accounts" in refused.content.decode()
    assert not get_user_model().objects.filter(username="bot3").exists()
    assert register("bot3", "198.51.100.9").status_code == 302
    AuditEvent.objects.filter(detail__address="203.0.113.7").update(
        created_at=timezone.now() - timedelta(hours=2)
    )  # an hour later
    assert register("bot4").status_code == 302
    settings.SIGNUP_LIMIT_PER_HOUR = 0
    assert register("bot5").status_code == 302 and register("bot6").status_code == 302


def test_a_user_changes_its_own_password(client, world):
    client.force_login(world.alice)
    wrong = client.post(
        "/password/",
        {
            "old_password": "nope",
            "new_password1": "new-Secret-456",
            "new_password2": "new-Secret-456",
        },
    )
    assert wrong.status_code == 200 and wrong.context["form"].errors
    done = client.post(
        "/password/",
        {
            "old_password": "pw-Secret-123",
            "new_password1": "new-Secret-456",
            "new_password2": "new-Secret-456",
        },
    )
    assert done.status_code == 302 and done["Location"] == "/password/done/"
    assert client.get("/password/done/").status_code == 200
    client.logout()
    assert logs_in(client, "alice", "new-Secret-456")
