"""Topics' traffic rules: counts and changes over 5 minutes, an hour or a day, compared
with a threshold, checked at their interval within their daily window; added and
deleted by application (console and API), validated, listed on the topic page and API."""

from __future__ import annotations

from datetime import UTC, datetime, time, timedelta

import pytest
from django.core import mail
from rest_framework.test import APIClient

from brokers.engine import Message
from brokers.models import Team, Topic
from mqcloud.alerts.models import MAX_RULES_PER_TOPIC, AlertEvent, TrafficRule
from mqcloud.alerts.rules import active_at, check_rules
from mqcloud.approvals import services
from mqcloud.approvals.models import Application, Status
from tests import factories
from tests.engine_calls import engine_call

pytestmark = pytest.mark.django_db


LONG_AGO = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.fixture
def feeds(traffic_topics):
    """``traffic_topics``, created long ago."""
    Topic.objects.update(created_at=LONG_AGO)


def produce(topic: str, n: int) -> None:
    engine_call(lambda e: e.append(topic, "maker", [Message(b"x")] * n))


def rule(code: str = "feed", **fields) -> TrafficRule:
    return TrafficRule.objects.create(topic=Topic.objects.get(code=code), **fields)


def at(hour: int, minute: int = 0) -> datetime:
    """That UTC time of a day."""
    return datetime(2026, 6, 1, hour, minute, tzinfo=UTC)


def test_the_daily_window_and_past_midnight():
    r = TrafficRule(active_from=time(9), active_to=time(18))
    assert active_at(r, at(9)) and active_at(r, at(12)) and active_at(r, at(18))
    assert not active_at(r, at(8, 59)) and not active_at(r, at(18, 1))
    night = TrafficRule(active_from=time(22), active_to=time(6))
    assert active_at(night, at(23)) and active_at(night, at(2))
    assert not active_at(night, at(12))
    assert active_at(TrafficRule(), at(3))  # no window: all day


def test_the_window_is_in_the_rules_time_zone():
    """09:00–18:00 in Shanghai (UTC+8) is 01:00–10:00 UTC; in New York it follows the
    daylight-saving change (EDT in June: 13:00–22:00 UTC); a zone the system lost counts
    as UTC."""
    shanghai = TrafficRule(active_from=time(9), active_to=time(18), time_zone="Asia/Shanghai")
    assert active_at(shanghai, at(1)) and active_at(shanghai, at(10))
    assert not active_at(shanghai, at(0, 59)) and not active_at(shanghai, at(12))
    new_york = TrafficRule(active_from=time(9), active_to=time(18), time_zone="America/New_York")
    assert active_at(new_york, at(13)) and not active_at(new_york, at(12, 59))
    winter = datetime(2026, 1, 15, 13, 30, tzinfo=UTC)  # EST: 08:30 there
    assert not active_at(new_york, winter)
    lost = TrafficRule(active_from=time(9), active_to=time(18), time_zone="Mars/Olympus")
    assert active_at(lost, at(12)) and not active_at(lost, at(8))
    shanghai.operand, shanghai.operator, shanghai.threshold = "count_5m", "lt", 1
    assert shanghai.describe().endswith("09:00–18:00 Asia/Shanghai")


def test_counts_match_over_whole_minutes_and_alert_the_receiver_once(feeds):
    produce("feed", 3)
    now = datetime.now(UTC)
    quiet = rule(operand="count_5m", operator="lt", threshold=1)
    busy = rule(operand="count_5m", operator="gte", threshold=3, every_minutes=1)
    rule("other", operand="count_1h", operator="gt", threshold=0)
    mail.outbox.clear()
    # a minute on, the 5 whole minutes before hold this minute's 3 messages
    (event,) = check_rules(now + timedelta(minutes=1))
    assert event.kind == AlertEvent.Kind.TRAFFIC_RULE and event.target == "topic:feed"
    assert event.detail["rule"] == busy.pk and event.detail["count"] == 3
    assert event.message == (
        "Traffic rule on feed: messages in 5 minutes ≥ 3, every 1 min matched (3)"
    )
    assert mail.outbox[0].to == sorted(
        u.email for u in Team.objects.get(name="red").members.all()
    )  # the producers' team: the topic's traffic-alert receiver
    assert TrafficRule.objects.get(pk=quiet.pk).checked_at is not None
    # every minute again: it still matches, but it alerted within the hour
    assert check_rules(now + timedelta(minutes=2)) == []
    # 7 minutes on, the 3 messages left the span: the quiet rule (every 5 min) matches
    (event,) = check_rules(now + timedelta(minutes=7))
    assert event.detail["rule"] == quiet.pk and event.detail["count"] == 0


def test_a_change_against_the_span_before(feeds):
    produce("feed", 4)
    now = datetime.now(UTC)
    dropped = rule(operand="ratio_5m", operator="lte", threshold=-50, every_minutes=1)
    # a minute on: the span holds 4, the span before none: no percentage, not checked
    assert check_rules(now + timedelta(minutes=1)) == []
    # 6 minutes on: the span is empty and the one before holds 4: −100 %
    (event,) = check_rules(now + timedelta(minutes=6))
    assert event.detail["rule"] == dropped.pk
    assert (event.detail["value"], event.detail["count"], event.detail["before"]) == (-100, 0, 4)
    assert "change against the 5 minutes before (%) ≤ -50%" in event.message


def test_interval_and_window_decide_when_a_rule_is_checked(feeds):
    now = datetime.now(UTC).replace(hour=12, minute=0)
    every5 = rule(operand="count_1d", operator="lt", threshold=1, every_minutes=5)
    night = rule(
        operand="count_5m", operator="lt", threshold=1, active_from=time(22), active_to=time(6)
    )
    Topic.objects.filter(code="feed").update(surge_alert_receiver=Topic.SurgeReceiver.NOBODY)
    check_rules(now)
    assert TrafficRule.objects.get(pk=every5.pk).checked_at == now
    assert TrafficRule.objects.get(pk=night.pk).checked_at is None  # noon: out of its window
    check_rules(now + timedelta(minutes=2))
    assert TrafficRule.objects.get(pk=every5.pk).checked_at == now  # not due yet
    check_rules(now + timedelta(minutes=5))
    assert TrafficRule.objects.get(pk=every5.pk).checked_at == now + timedelta(minutes=5)
    check_rules(now.replace(hour=23))
    assert TrafficRule.objects.get(pk=night.pk).checked_at == now.replace(hour=23)
    assert not AlertEvent.objects.exists()  # they matched, but nobody is to hear of it


def test_a_topic_younger_than_what_a_rule_measures_waits(feeds):
    now = datetime.now(UTC)
    Topic.objects.filter(code="feed").update(created_at=now - timedelta(hours=1))
    day = rule(operand="count_1d", operator="lt", threshold=1)
    hour = rule(operand="count_1h", operator="lt", threshold=1)
    change = rule(operand="ratio_1h", operator="lt", threshold=0)
    (event,) = check_rules(now)  # the hour's count only: an hour old, silent all along
    assert event.detail["rule"] == hour.pk
    assert TrafficRule.objects.get(pk=day.pk).checked_at is None
    assert TrafficRule.objects.get(pk=change.pk).checked_at is None  # needs two hours


def _apply(client, **fields):
    return client.post("/applications/new/", fields)


def test_rules_are_added_and_deleted_by_application(feeds, client):
    rita = Team.objects.get(name="red").members.get(username="rita")
    boss = factories.user("boss", admin=True)
    client.force_login(rita)
    good = {"kind": "traffic_rule_add", "code": "feed", "operand": "count_1h", "operator": "lt"}
    for bad, field in (
        ({"threshold": "-1"}, "threshold"),  # a count below 0
        ({"threshold": "10", "operator": "eq"}, "operator"),
        ({"threshold": "10", "every_minutes": "0"}, "every_minutes"),
        ({"threshold": "10", "every_minutes": "1441"}, "every_minutes"),
        ({"threshold": "10", "active_from": "09:00"}, "active_to"),  # one end only
        ({"threshold": "10", "active_from": "25:00", "active_to": "06:00"}, "active_from"),
        ({"threshold": "-101", "operand": "ratio_1h"}, "threshold"),
        (
            {"threshold": "1", "active_from": "9:00", "active_to": "18:00", "time_zone": "Mars/X"},
            "time_zone",
        ),
    ):
        page = _apply(client, **{**good, "every_minutes": "5", **bad})
        assert page.status_code == 200, bad
        assert field in page.context["form"].errors, (bad, page.context["form"].errors)
    assert not Application.objects.exists()
    filed = _apply(
        client, **good, threshold="100", every_minutes="15", active_from="09:00", active_to="18:00"
    )
    assert filed.status_code == 302, filed.content.decode()[:2000]
    application = Application.objects.get(kind="traffic_rule_add")
    assert application.payload == {
        "code": "feed",
        "operand": "count_1h",
        "operator": "lt",
        "threshold": 100.0,
        "every_minutes": 15,
        "active_from": "09:00",
        "active_to": "18:00",
    }
    services.approve(application, boss)
    (added,) = TrafficRule.objects.filter(topic__code="feed")
    assert added.describe() == "messages in an hour < 100, every 15 min, 09:00–18:00 UTC"
    page = client.get("/topics/feed/").content.decode()
    assert "messages in an hour &lt; 100, every 15 min, 09:00–18:00 UTC" in page
    assert "Of your topics, 1 has rules." in client.get("/alerts/").content.decode()
    filed = _apply(client, kind="traffic_rule_delete", code="feed", rule=str(added.pk))
    assert filed.status_code == 302
    services.approve(Application.objects.get(kind="traffic_rule_delete"), boss)
    assert not TrafficRule.objects.exists()
    # a rule that is not the topic's
    other = rule("other", operand="count_5m", operator="lt", threshold=1)
    page = _apply(client, kind="traffic_rule_delete", code="feed", rule=str(other.pk))
    assert page.status_code == 200 and "rule" in page.context["form"].errors


def test_the_api_lists_rules_and_refuses_bad_ones(feeds):
    api = APIClient()
    rita = Team.objects.get(name="red").members.get(username="rita")
    bert = Team.objects.get(name="blue").members.get(username="bert")
    rule(operand="ratio_1d", operator="gt", threshold=200)
    api.force_authenticate(rita)
    (listed,) = api.get("/api/v1/topics/feed/traffic-rules/").json()
    assert (listed["operand"], listed["threshold"], listed["topic"]) == ("ratio_1d", 200, "feed")
    assert listed["description"] == "change against the day before (%) > 200%, every 5 min"

    def apply(payload: dict, user=rita):
        api.force_authenticate(user)
        return api.post(
            "/api/v1/applications/", {"kind": "traffic_rule_add", "payload": payload}, format="json"
        )

    base = {"code": "feed", "operand": "count_5m", "operator": "lt", "threshold": 1}
    for bad in (
        {**base, "threshold": "1"},  # a string, not a number
        {**base, "operand": "count_2m"},
        {**base, "every_minutes": True},
        {**base, "active_from": "09:00"},
        {**base, "colour": "red"},
        {**base, "code": "nope"},
        {**base, "time_zone": "Nowhere/City"},
        {**base, "time_zone": 8},
        {**base, "time_zone": "x" * 65},
    ):
        assert apply(bad).status_code in (400, 404), bad
    local = apply({**base, "active_from": "09:00", "active_to": "18:00", "time_zone": "Asia/Tokyo"})
    assert local.status_code == 201, local.json()
    services.approve(
        Application.objects.get(pk=local.json()["id"]), factories.user("tz", admin=True)
    )
    tokyo = TrafficRule.objects.get(time_zone="Asia/Tokyo")
    assert tokyo.describe().endswith("09:00–18:00 Asia/Tokyo")
    tokyo.delete()
    refused = apply(base, user=bert)  # not his team's topic: as for every kind
    assert refused.status_code == 400 and b"code" in refused.content, refused.content
    assert apply(base).status_code == 201
    for n in range(MAX_RULES_PER_TOPIC - 1):
        rule(operand="count_5m", operator="gt", threshold=n)
    application = Application.objects.get(kind="traffic_rule_add", status=Status.PENDING)
    services.approve(application, factories.user("chief", admin=True))
    application.refresh_from_db()
    assert application.status == Status.FAILED and "20 rules" in application.error


def test_a_rule_id_beyond_any_stored_one_is_refused_not_a_500(feeds, client):
    """Ids no rule can have (past PostgreSQL's bigint, not positive, not a JSON number)
    get the application's own error, not a database error."""
    rita = Team.objects.get(name="red").members.get(username="rita")
    api = APIClient()
    api.force_authenticate(rita)
    for rule_id in (2**63, 10**30, -1, 0, "3", True):
        refused = api.post(
            "/api/v1/applications/",
            {"kind": "traffic_rule_delete", "payload": {"code": "feed", "rule": rule_id}},
            format="json",
        )
        assert refused.status_code == 400, (rule_id, refused.content)
        assert b"rule" in refused.content
    client.force_login(rita)
    page = _apply(client, kind="traffic_rule_delete", code="feed", rule=str(2**63))
    assert page.status_code == 200 and "rule" in page.context["form"].errors
    assert not Application.objects.exists()
