"""Alerts as text messages (console-features "Alert channels": SMS, per-user opt-in): a
user gives a number on the alerts page (validated, audited without it) and its teams'
alerts — and a platform admin's, the platform's — are posted to the SMS gateway for it;
a gateway that fails leaves the alert in the history with what it answered; without a
gateway nothing is sent and the page says so."""

from __future__ import annotations

import json

import pytest

from brokers.models import Team
from mqcloud.alerts.delivery import alert_admins, alert_team, platform_admin_emails
from mqcloud.alerts.models import AlertEvent, SmsSubscription
from mqcloud.approvals.models import AuditEvent
from tests import factories
from tests.http_sink import http_sink

pytestmark = pytest.mark.django_db


@pytest.fixture
def gateway(settings):
    """A local SMS gateway recording what it is asked to send (and with which token);
    ``status`` is what it answers."""
    with http_sink() as sink:
        settings.SMS_GATEWAY_URL = f"{sink.url}/sms"
        settings.SMS_GATEWAY_TOKEN = "gw-secret"
        yield sink


def fire(team: Team, message: str = "dead letters") -> AlertEvent:
    return alert_team(AlertEvent.Kind.DEAD_LETTERS, "consumer:x.y", team, message, {})


def test_a_member_opts_in_and_gets_its_teams_alerts(client, gateway):
    team = Team.objects.create(name="texted")
    member = factories.user("member", team=team)
    factories.user("quiet", team=team)  # no number: e-mail only
    client.force_login(member)
    page = client.get("/alerts/").content.decode()
    assert 'id="sms-alerts"' in page and "They are not texted to you." in page
    for bad in ("12345", "+0123456789", "+86 138 0013 8000 999999", "phone"):
        refused = client.post("/alerts/sms/", {"phone": bad}, follow=True)
        assert "An international number" in refused.content.decode(), bad
    assert not SmsSubscription.objects.exists()
    client.post("/alerts/sms/", {"phone": "+86 138 0013 8000"})
    assert SmsSubscription.objects.get(user=member).phone == "+8613800138000"
    assert "…8000" in client.get("/alerts/").content.decode()
    event = fire(team, "x" * 400)
    assert event.sms_status == "sent to 1"
    (sent,) = gateway.sent
    assert sent["to"] == ["+8613800138000"] and len(sent["text"]) == 300
    assert gateway.auth == ["Bearer gw-secret"]
    events = AuditEvent.objects.filter(actor=member).values_list("action", "detail")
    assert [a for a, _ in events] == ["sms-alerts-on"]
    assert "8000" not in json.dumps([d for _, d in events])
    client.post("/alerts/sms/", {"phone": ""})
    assert not SmsSubscription.objects.exists()
    assert fire(team).sms_status == "" and len(gateway.sent) == 1


def test_platform_alerts_reach_the_admins_who_opted_in(gateway):
    root = factories.user("root", admin=True)
    SmsSubscription.objects.create(user=root, phone="+4915112345678")
    event = alert_admins(
        AlertEvent.Kind.BROKER_DOWN, "broker:1", "down", {}, platform_admin_emails()
    )
    assert event.sms_status == "sent to 1" and gateway.sent[0]["to"] == ["+4915112345678"]


def test_a_failing_gateway_leaves_the_alert_in_the_history(gateway, settings):
    team = Team.objects.create(name="texted")
    SmsSubscription.objects.create(user=factories.user("m", team=team), phone="+12025550123")
    gateway.status = 503
    assert fire(team).sms_status == "503"
    settings.SMS_GATEWAY_URL = "http://127.0.0.1:9/sms"  # nothing listens there
    event = fire(team)
    assert event.sms_status == "ConnectError" and AlertEvent.objects.filter(pk=event.pk).exists()


def test_without_a_gateway_nothing_is_texted(client, settings):
    settings.SMS_GATEWAY_URL = ""
    team = Team.objects.create(name="texted")
    member = factories.user("member", team=team)
    SmsSubscription.objects.create(user=member, phone="+12025550123")
    assert fire(team).sms_status == ""
    client.force_login(member)
    assert "This platform has no SMS gateway" in client.get("/alerts/").content.decode()
