"""The alert channels on the alerts page (platform admins): each configured channel,
whether it is paused after a failure and for how long, how many alerts wait for it,
and "Resume now" once it is fixed — audited, and what waited goes with the next retry
run."""

from __future__ import annotations

import pytest
from django.core import mail

from brokers.models import Team
from mqcloud import tasks
from mqcloud.alerts import channels
from mqcloud.alerts.delivery import alert_team
from mqcloud.alerts.models import AlertEvent
from mqcloud.approvals.models import AuditEvent
from tests import factories

pytestmark = pytest.mark.django_db


@pytest.fixture
def down_mail(smtp_down, settings):
    settings.ALERT_WEBHOOK_URL = settings.SMS_GATEWAY_URL = ""


def test_a_paused_channel_is_shown_with_what_waits_and_resumed(client, down_mail, settings):
    team = Team.objects.create(name="paged")
    member = factories.user("pat", team=team)
    root = factories.user("root", admin=True)
    client.force_login(root)
    page = client.get("/alerts/")
    (mail_row,) = page.context["channels"]
    assert mail_row.state.name == "mail" and mail_row.state.paused_seconds is None
    assert "working" in page.content.decode()
    alert_team(AlertEvent.Kind.DEAD_LETTERS, "consumer:a.t", team, "mail down", {})
    (mail_row,) = client.get("/alerts/").context["channels"]
    assert 0 < mail_row.state.paused_seconds <= settings.ALERT_CHANNEL_PAUSE_SECONDS
    assert mail_row.waiting == 1
    resumed = client.post("/alerts/channels/resume/", {"channel": "mail"})
    assert resumed.status_code == 302 and resumed["Location"] == "/alerts/#alert-channels"
    assert not channels.paused("mail", channels.mail_address())
    assert AuditEvent.objects.filter(
        action="alert-channel-resumed", target="alert-channel:mail", actor=root
    ).exists()
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    mail.outbox.clear()
    assert tasks.retry_alert_deliveries() == 1
    assert mail.outbox[0].to == [member.email]
    (mail_row,) = client.get("/alerts/").context["channels"]
    assert mail_row.waiting == 0


def test_only_admins_see_and_resume_channels(client, settings):
    settings.ALERT_WEBHOOK_URL = "https://hooks.example.test:8443/in?token=s3cret"
    client.force_login(factories.user("alice"))
    page = client.get("/alerts/")
    assert page.context["channels"] == [] and 'id="alert-channels"' not in page.content.decode()
    assert client.post("/alerts/channels/resume/", {"channel": "webhook"}).status_code == 403
    client.force_login(factories.user("root", admin=True))
    page = client.get("/alerts/").content.decode()
    assert "https://hooks.example.test:8443" in page and "s3cret" not in page


def test_an_unknown_channel_resumes_nothing(client, settings):
    settings.SMS_GATEWAY_URL = ""
    channels.pause("sms", "http://gateway.example.test/")
    try:
        client.force_login(factories.user("root", admin=True))
        answer = client.post("/alerts/channels/resume/", {"channel": "sms"}, follow=True)
        assert "Choose one of the configured alert channels." in answer.content.decode()
        assert channels.paused("sms", "http://gateway.example.test/")
        assert not AuditEvent.objects.filter(action="alert-channel-resumed").exists()
    finally:
        channels.resume("sms", "http://gateway.example.test/")


def test_the_api_lists_reads_and_resumes_channels(client, down_mail, settings):
    team = Team.objects.create(name="paged")
    factories.user("pat", team=team)
    api = "/api/v1/alert-channels/"
    client.force_login(factories.user("alice"))
    assert client.get(api).status_code == 403
    assert client.post(f"{api}mail/resume/").status_code == 403
    client.force_login(factories.user("root", admin=True))
    assert client.get(api).json() == [
        {
            "name": "mail",
            "label": "E-mail",
            "address": f"{settings.EMAIL_HOST}:{settings.EMAIL_PORT}",
            "paused_seconds": None,
            "waiting": 0,
        }
    ]
    alert_team(AlertEvent.Kind.DEAD_LETTERS, "consumer:a.t", team, "mail down", {})
    row = client.get(f"{api}mail/").json()
    assert row["paused_seconds"] > 0 and row["waiting"] == 1
    resumed = client.post(f"{api}mail/resume/")
    assert resumed.status_code == 200 and resumed.json()["paused_seconds"] is None
    assert AuditEvent.objects.filter(action="alert-channel-resumed").count() == 1
    assert client.get(f"{api}webhook/").status_code == 404  # not configured here
    assert client.post(f"{api}nope/resume/").status_code == 404
