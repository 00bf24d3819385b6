"""Alert channels that fail: what an alert could not send (SMTP down, the webhook or the
SMS gateway unreachable or answering 5xx) stays on its event and is sent again once the
channel works; meanwhile a failed channel is paused, so an outage that fires a burst of
alerts does not pay a timeout per alert; a 4xx (the request is wrong) is final, and
after ``ALERT_RETRY_HOURS`` the event gives up."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.conf import settings as django_settings
from django.core import mail
from django.utils import timezone

from brokers.models import Team
from mqcloud import tasks
from mqcloud.alerts import channels
from mqcloud.alerts.delivery import alert_team
from mqcloud.alerts.models import AlertEvent, SmsSubscription
from tests import factories
from tests.http_sink import http_sink

pytestmark = pytest.mark.django_db


@pytest.fixture
def endpoint(settings):
    """A local HTTP service answering ``status`` to every POST (as SMS gateway and
    webhook), recording what it got."""
    with http_sink() as sink:
        settings.SMS_GATEWAY_URL = f"{sink.url}/sms"
        settings.ALERT_WEBHOOK_URL = f"{sink.url}/hook"
        yield sink
    channels.resume("sms", f"{sink.url}/sms")
    channels.resume("webhook", f"{sink.url}/hook")


@pytest.fixture
def team() -> Team:
    team = Team.objects.create(name="paged")
    member = factories.user("pat", team=team)
    member.email = "pat@example.test"
    member.save()
    SmsSubscription.objects.create(user=member, phone="+12025550123")
    return team


def fire(team: Team, message: str) -> AlertEvent:
    return alert_team(AlertEvent.Kind.DEAD_LETTERS, "consumer:a.t", team, message, {})


def test_a_failing_gateway_is_paused_and_what_it_missed_is_sent_later(endpoint, team, client):
    endpoint.status = 503
    first = fire(team, "first")
    assert first.sms_status == "503" and first.webhook_status == "503"
    assert first.pending == {"webhook": True, "numbers": ["+12025550123"]} and first.emailed
    second = fire(team, "second")  # paused: not tried, kept
    assert second.sms_status.startswith("deferred") and second.pending == first.pending
    assert len(endpoint.sent) == 2  # the first alert's SMS and webhook, nothing since
    client.force_login(team.members.get())
    assert client.get("/alerts/").content.decode().count("retrying") == 4
    assert tasks.retry_alert_deliveries() == 2  # still paused: tried, nothing sent
    assert len(endpoint.sent) == 2

    endpoint.status = 200  # the gateway is back, and the pause over
    channels.resume("sms", django_settings.SMS_GATEWAY_URL)
    channels.resume("webhook", django_settings.ALERT_WEBHOOK_URL)
    assert tasks.retry_alert_deliveries() == 2
    for event in AlertEvent.objects.filter(pk__in=[first.pk, second.pk]):
        assert event.pending == {} and event.sms_status == "sent to 1"
        assert event.webhook_status == "200"
    texts = sorted(
        b["text"] for p, b in zip(endpoint.paths, endpoint.sent, strict=True) if p == "/sms"
    )
    assert texts == ["[mqcloud] first", "[mqcloud] first", "[mqcloud] second"]
    assert tasks.retry_alert_deliveries() == 0  # nothing left
    assert "retrying" not in client.get("/alerts/").content.decode()


def test_a_refusal_is_final_and_pauses_nothing(endpoint, team):
    endpoint.status = 400
    event = fire(team, "malformed")
    assert event.sms_status == "400" and event.webhook_status == "400" and event.pending == {}
    endpoint.status = 200
    assert fire(team, "next").sms_status == "sent to 1"  # tried at once: not paused
    assert tasks.retry_alert_deliveries() == 0


def test_mail_that_fails_is_sent_again_when_smtp_is_back(settings, team, smtp_down):
    settings.ALERT_WEBHOOK_URL = settings.SMS_GATEWAY_URL = ""
    event = fire(team, "mail down")
    assert not event.emailed and event.pending == {"emails": ["pat@example.test"]}
    assert not fire(team, "still down").emailed  # paused: DownBackend not asked again
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    mail.outbox.clear()
    assert tasks.retry_alert_deliveries() == 2
    assert sorted(m.subject for m in mail.outbox) == [
        "[mqcloud] mail down",
        "[mqcloud] still down",
    ]
    assert all(e.emailed and e.pending == {} for e in AlertEvent.objects.all())


def test_an_event_gives_up_after_the_retry_window(endpoint, team, settings):
    endpoint.status = 502
    event = fire(team, "old")
    assert event.pending
    settings.ALERT_RETRY_HOURS = 1
    AlertEvent.objects.filter(pk=event.pk).update(created_at=timezone.now() - timedelta(hours=2))
    assert tasks.retry_alert_deliveries() == 0
    event.refresh_from_db()
    assert event.pending == {} and event.sms_status == "gave up after 1 h"
    assert event.webhook_status == "gave up after 1 h"


def test_smtp_has_a_timeout_and_retries_run_every_minute():
    assert django_settings.EMAIL_TIMEOUT and django_settings.EMAIL_TIMEOUT <= 60
    beat = django_settings.CELERY_BEAT_SCHEDULE["alert-delivery-retries"]
    assert beat["task"] == "mqcloud.tasks.retry_alert_deliveries"
    assert beat["schedule"] == timedelta(minutes=1)
