"""Becoming an admin from the console: the form offers the user's teams it is a member of
and the platform, files a pending application a platform admin approves; the approval
settings page never offers it for auto-approval."""

from __future__ import annotations

import pytest

from brokers.models import TeamMembership
from mqcloud.approvals.models import Application

pytestmark = pytest.mark.django_db


def test_a_member_applies_in_the_console_and_a_platform_admin_approves(client, world):
    client.force_login(world.alice)
    form = client.get("/applications/new/?kind=become_admin")
    assert form.status_code == 200
    choices = dict(form.context["form"].fields["admin_of"].choices)
    assert choices == {"team:red": "the team red", "platform": "the platform"}
    filed = client.post("/applications/new/", {"kind": "become_admin", "admin_of": "team:red"})
    application = Application.objects.get()
    assert filed["Location"] == f"/applications/{application.pk}/"
    assert (application.status, application.payload) == ("pending", {"team": "red"})
    bad = client.post("/applications/new/", {"kind": "become_admin", "admin_of": "team:blue"})
    assert bad.status_code == 200 and bad.context["form"].errors  # not a choice of hers
    client.force_login(world.root)
    client.post(f"/applications/{application.pk}/approve/")
    assert TeamMembership.objects.get(user=world.alice, team=world.red).role == "admin"
    client.force_login(world.carol)  # a team admin: only the platform is left to ask
    choices = dict(
        client.get("/applications/new/?kind=become_admin")
        .context["form"]
        .fields["admin_of"]
        .choices
    )
    assert choices == {"platform": "the platform"}


def test_the_settings_page_never_offers_it_for_auto_approval(client, world):
    client.force_login(world.root)
    page = client.get("/applications/settings/")
    assert page.status_code == 200
    assert 'value="become_admin"' not in page.content.decode()
    assert 'value="pause"' in page.content.decode()
    posted = client.post("/applications/settings/", {"auto_approve": ["become_admin"]})
    assert posted.status_code == 400 and posted.context["form"].errors
