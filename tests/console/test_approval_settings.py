"""The approval settings page: platform admins only, inline errors, audited, effective."""

from __future__ import annotations

import re

import pytest
from django.test import Client

from mqcloud.approvals.models import Application, ApprovalSettings, AuditEvent, Status

pytestmark = pytest.mark.django_db
URL = "/applications/settings/"


def test_only_platform_admins_see_and_change_it(client, world):
    for user in (world.alice, world.carol):
        client.force_login(user)
        assert client.get(URL).status_code == 403
        assert client.post(URL, {"auto_approve": ["pause"]}).status_code == 403
    assert ApprovalSettings.current().auto_approve == []
    client.logout()
    assert client.get(URL).status_code == 302  # to the login page


def test_admin_changes_settings_and_the_audit_trail_says_what(client, world):
    client.force_login(world.root)
    page = client.get(URL).content.decode()
    assert 'type="checkbox" name="auto_approve" value="pause"' in page
    assert "<legend>Approved automatically</legend>" in page
    assert 'href="/applications/settings/"' in client.get("/applications/queue/").content.decode()

    saved = client.post(URL, {"auto_approve": ["resume", "pause"], "frozen": "on"})
    assert saved.status_code == 302 and saved["Location"] == URL
    current = ApprovalSettings.current()
    assert (current.auto_approve, current.frozen) == (["pause", "resume"], True)
    event = AuditEvent.objects.get(action="approval-settings")
    assert event.actor == world.root
    assert event.detail["auto_approve_added"] == ["pause", "resume"]
    assert event.detail["frozen"] is True
    shown = client.get(URL).content.decode()
    checked = set(
        re.findall(r'<input type="checkbox" name="auto_approve" value="(\w+)"[^>]*checked', shown)
    )
    assert checked == {"pause", "resume"}
    assert re.search(r'name="frozen"[^>]*checked', shown)

    client.post(URL, {"auto_approve": ["pause"]})  # unfreeze, drop resume
    event = AuditEvent.objects.filter(action="approval-settings").first()
    assert event.detail["auto_approve_removed"] == ["resume"] and event.detail["frozen"] is False
    client.post(URL, {"auto_approve": ["pause"]})  # no change: nothing recorded
    assert AuditEvent.objects.filter(action="approval-settings").count() == 2

    # in force: a pause now executes as soon as it is filed
    client.force_login(world.alice)
    client.post("/applications/new/", {"kind": "pause", "consumer": "shop.orders"})
    application = Application.objects.get(kind="pause")
    assert application.status == Status.APPROVED and application.auto_approved


def test_invalid_choice_is_shown_inline(client, world):
    client.force_login(world.root)
    response = client.post(URL, {"auto_approve": ["pause", "drop_database"]})
    assert response.status_code == 400
    body = response.content.decode()
    assert 'role="alert"' in body and "drop_database is not one of the available choices" in body
    assert 'aria-invalid="true"' in body
    assert ApprovalSettings.current().auto_approve == []
    assert not AuditEvent.objects.filter(action="approval-settings").exists()


def test_settings_post_needs_a_csrf_token(world):
    csrf = Client(enforce_csrf_checks=True)
    csrf.force_login(world.root)
    assert csrf.post(URL, {"frozen": "on"}).status_code == 403
    assert ApprovalSettings.current().frozen is False
