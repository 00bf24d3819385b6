"""Alert copies (console-features): a platform admin chooses on the alerts page to be
copied on every alert, whoever it is for, and stops; the choice is audited; others may
not make it; an admin no longer an admin is not copied."""

from __future__ import annotations

import pytest
from django.core import mail

from brokers.models import Team
from mqcloud.alerts.delivery import alert_admins, alert_team, platform_admin_emails
from mqcloud.alerts.models import AlertCopy, AlertEvent
from mqcloud.approvals.models import AuditEvent
from tests import factories

pytestmark = pytest.mark.django_db


def fire(team: Team) -> list[str]:
    """A team alert; who it was e-mailed to."""
    alert_team(AlertEvent.Kind.DEAD_LETTERS, "consumer:x.y", team, "dead letters", {})
    return mail.outbox[-1].to


def test_an_admin_is_copied_on_every_alert_until_they_stop(client):
    team = Team.objects.create(name="owners")
    factories.user("member", team=team)
    root = factories.user("root", admin=True)
    assert fire(team) == ["member@example.test"]
    client.force_login(root)
    page = client.get("/alerts/").content.decode()
    assert 'id="platform-alerts"' in page and "Copy me on every alert" in page
    for wrong in ({"copy": "yes"}, {}):  # neither on nor off: refused, nothing changes
        refused = client.post("/alerts/copies/", wrong, follow=True)
        assert "Choose on or off." in refused.content.decode()
    assert not AlertCopy.objects.exists()
    reply = client.post("/alerts/copies/", {"copy": "on"})
    assert reply.status_code == 302 and reply["Location"].endswith("/alerts/#platform-alerts")
    assert fire(team) == ["member@example.test", "root@example.test"]
    page = client.get("/alerts/").content.decode()
    assert "Stop copying me" in page and "root@example.test" in page
    # an alert for the admins already reaches a copied admin once
    alert_admins(AlertEvent.Kind.BROKER_DOWN, "broker:1", "down", {}, platform_admin_emails())
    assert mail.outbox[-1].to == ["root@example.test"]
    client.post("/alerts/copies/", {"copy": "off"})
    assert fire(team) == ["member@example.test"]
    actions = list(AuditEvent.objects.filter(actor=root).values_list("action", flat=True))
    assert sorted(actions) == ["alert-copies-off", "alert-copies-on"]


def test_only_platform_admins_are_copied(client):
    team = Team.objects.create(name="owners")
    member = factories.user("member", team=team)
    client.force_login(member)
    assert 'id="platform-alerts"' not in client.get("/alerts/").content.decode()
    assert client.post("/alerts/copies/", {"copy": "on"}).status_code == 403
    assert not AlertCopy.objects.exists()
    assert client.get("/alerts/copies/").status_code == 405
    demoted = factories.user("former", admin=True)
    AlertCopy.objects.create(user=demoted)
    assert "former@example.test" in fire(team)
    demoted.is_staff = demoted.is_superuser = False
    demoted.save()
    assert fire(team) == ["member@example.test"]
