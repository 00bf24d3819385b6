"""Login through an external identity provider (console-features "Login is pluggable"):
a trusted single-sign-on proxy names the user in LOGIN_HEADER; the user is logged in
(created on its first visit, in no team, audited), only from the trusted proxies, never
for an account switched off or a name that is no username, never counting towards the
proxy address's lockout; local accounts keep working; off unless configured."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from mqcloud.approvals.models import AuditEvent

pytestmark = pytest.mark.django_db
PROXY = "10.1.2.3"


@pytest.fixture
def sso(settings):
    settings.LOGIN_HEADER = "X-Forwarded-User"
    settings.LOGIN_HEADER_EMAIL = "X-Forwarded-Email"
    settings.LOGIN_HEADER_TRUSTED_PROXIES = ["10.1.2.0/24"]
    settings.LOGIN_HEADER_CREATE_USERS = True
    return settings


def via_proxy(client, user: str, path: str = "/", **extra):
    return client.get(path, REMOTE_ADDR=PROXY, HTTP_X_FORWARDED_USER=user, **extra)


def test_the_proxys_user_is_logged_in_and_created_once(client, world, sso):
    page = via_proxy(client, "dana", HTTP_X_FORWARDED_EMAIL="dana@example.com")
    assert page.status_code == 200 and page.context["user"].username == "dana"
    dana = get_user_model().objects.get(username="dana")
    assert dana.email == "dana@example.com" and not dana.has_usable_password()
    assert not dana.memberships.exists()  # in no team until a team's admin adds it
    assert client.get("/topics/", REMOTE_ADDR=PROXY).context["user"] == dana  # the session
    via_proxy(client, "dana")
    assert get_user_model().objects.filter(username="dana").count() == 1
    trail = AuditEvent.objects.filter(action="user-registered", target="user:dana")
    assert [e.detail for e in trail] == [{"via": "login-header"}]
    switched = via_proxy(client, "alice")  # someone else at the keyboard
    assert switched.context["user"] == world.alice


def test_only_a_trusted_proxy_is_believed(client, world, sso):
    direct = client.get("/", REMOTE_ADDR="203.0.113.5", HTTP_X_FORWARDED_USER="root")
    assert direct.status_code == 302 and direct["Location"].startswith("/login/")
    sso.LOGIN_HEADER = ""
    off = via_proxy(client, "root")  # not configured: the header means nothing
    assert off.status_code == 302 and off["Location"].startswith("/login/")


def test_bad_names_and_switched_off_accounts_log_nobody_in(client, world, sso):
    for name in ("", "   ", "bad name!", "x" * 151, "a\x01b"):
        assert via_proxy(client, name).status_code == 302
    world.bob.is_active = False
    world.bob.save()
    assert via_proxy(client, "bob").status_code == 302
    for _ in range(8):  # more than the lockout's 5 failures: the proxy is not locked out
        via_proxy(client, "bob")
    assert via_proxy(client, "alice").context["user"] == world.alice
    sso.LOGIN_HEADER_CREATE_USERS = False
    client.logout()
    assert via_proxy(client, "stranger").status_code == 302
    assert not get_user_model().objects.filter(username="stranger").exists()


def test_local_accounts_keep_working_beside_it(client, world, sso):
    world.alice.set_password("pw-Secret-123")
    world.alice.save()
    done = client.post(
        "/login/", {"username": "alice", "password": "pw-Secret-123"}, REMOTE_ADDR="127.0.0.1"
    )
    assert done.status_code == 302
    assert client.get("/", REMOTE_ADDR="127.0.0.1").context["user"] == world.alice
