"""Traffic-silence alerts: an opted-in topic nothing was produced to for its silence
alerts its traffic-alert receiver once per throttle window; the rule is set by topic
applications (console and API) and validated."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.core import mail

from brokers.catalog_loader import publish
from brokers.engine import Message
from brokers.models import Team, Topic
from mqcloud.alerts.models import AlertEvent
from mqcloud.alerts.silence import check_silence
from tests import factories
from tests.engine_calls import engine_call

pytestmark = pytest.mark.django_db

LONG_AGO = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.fixture
def feeds(traffic_topics):
    """``traffic_topics``, created long ago; 'feed' with a silence alert of 10 minutes,
    'other' without; platform admin root."""
    factories.user("root", admin=True)
    Topic.objects.update(created_at=LONG_AGO)
    Topic.objects.filter(code="feed").update(silence_alert_minutes=10)
    publish()


def produce(topic: str) -> None:
    engine_call(lambda e: e.append(topic, "maker", [Message(b"x")]))


def test_a_topic_silent_for_its_minutes_alerts_its_receiver_once(feeds):
    produce("feed")
    now = datetime.now(UTC)
    assert check_silence(now) == []  # produced this minute
    assert check_silence(now + timedelta(minutes=5)) == []  # within its 10 minutes
    mail.outbox.clear()
    (event,) = check_silence(now + timedelta(minutes=12))  # 'other' is not watched
    assert event.kind == AlertEvent.Kind.TRAFFIC_SILENCE and event.target == "topic:feed"
    assert event.message == "Traffic stopped on feed: nothing produced in 10 min"
    assert event.team.name == "red" and event.detail == {"minutes": 10, "receiver": "producer"}
    (sent,) = mail.outbox
    assert sent.to == sorted(u.email for u in Team.objects.get(name="red").members.all())
    assert check_silence(now + timedelta(minutes=13)) == []  # throttled


def test_traffic_over_the_window_keeps_it_quiet_and_a_young_topic_waits(feeds):
    now = datetime.now(UTC)
    Topic.objects.filter(code="feed").update(created_at=now - timedelta(minutes=3))
    assert check_silence(now) == []  # not 10 minutes old yet: not silent that long
    Topic.objects.filter(code="feed").update(created_at=LONG_AGO)
    produce("feed")
    assert check_silence(now + timedelta(minutes=9)) == []
    (event,) = check_silence(now + timedelta(minutes=11))
    assert event.target == "topic:feed"


def test_the_receiver_decides_who_hears_or_that_nobody_does(feeds):
    Topic.objects.filter(code="feed").update(surge_alert_receiver=Topic.SurgeReceiver.NOBODY)
    assert check_silence() == []  # silent since it was created, but nobody listens
    Topic.objects.filter(code="feed").update(surge_alert_receiver=Topic.SurgeReceiver.CONSUMER)
    mail.outbox.clear()
    (event,) = check_silence()
    assert event.detail["receiver"] == "consumer"
    blue = Team.objects.get(name="blue")
    assert mail.outbox[0].to == sorted(u.email for u in blue.members.all() if u.email)


def test_the_silence_is_set_by_application_and_validated(feeds, client):
    from mqcloud.approvals import services
    from mqcloud.approvals.models import Application

    rita = Team.objects.get(name="red").members.get(username="rita")
    client.force_login(rita)
    for bad in ("-1", "1441", "ten"):
        refused = client.post(
            "/applications/new/",
            {"kind": "topic_update", "code": "other", "silence_alert_minutes": bad},
        )
        assert (
            refused.status_code == 200 and "silence_alert_minutes" in refused.context["form"].errors
        ), bad
    filed = client.post(
        "/applications/new/",
        {"kind": "topic_update", "code": "other", "silence_alert_minutes": "30"},
    )
    assert filed.status_code == 302, filed.content.decode()[:2000]
    application = Application.objects.get(kind="topic_update")
    assert application.payload["changes"] == {"silence_alert_minutes": 30}
    services.approve(application, factories.user("boss", admin=True))
    assert Topic.objects.get(code="other").silence_alert_minutes == 30
    page = client.get("/topics/other/").content.decode()
    assert "also when nothing is produced for 30 min" in page
    assert "Of your topics, 2 have one." in client.get("/alerts/").content.decode()
    # back to never with 0
    filed = client.post(
        "/applications/new/",
        {"kind": "topic_update", "code": "other", "silence_alert_minutes": "0"},
    )
    assert filed.status_code == 302
    services.approve(
        Application.objects.get(kind="topic_update", status="pending"),
        factories.user("chief", admin=True),
    )
    assert Topic.objects.get(code="other").silence_alert_minutes == 0


def test_the_api_takes_and_refuses_the_silence(feeds):
    from rest_framework.test import APIClient

    api = APIClient()
    api.force_authenticate(Team.objects.get(name="red").members.get(username="rita"))
    shown = api.get("/api/v1/topics/feed/").json()
    assert shown["silence_alert_minutes"] == 10
    for bad in (-1, 1441, "x", None):
        r = api.post(
            "/api/v1/applications/",
            {"kind": "topic_update", "payload": {"code": "feed", "changes": {
                "silence_alert_minutes": bad}}},
            format="json",
        )  # fmt: skip
        assert r.status_code == 400, (bad, r.content)
    r = api.post(
        "/api/v1/applications/",
        {"kind": "topic_update", "payload": {"code": "feed", "changes": {
            "silence_alert_minutes": 60}}},
        format="json",
    )  # fmt: skip
    assert r.status_code == 201, r.content
