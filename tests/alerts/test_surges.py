"""Traffic-surge alerts: daily peaks without outliers, the two thresholds and the minimum,
the receiver set on the topic, the throttle, and the history's upkeep."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest
import redis
from django.conf import settings as django_settings
from django.core import mail

from brokers.models import ConsumerPolicy, ProducerPolicy, Team
from mqcloud.alerts import surges
from mqcloud.alerts.models import AlertEvent, TopicDailyPeak
from pipeline.models import TrafficMinute
from tests import factories
from tests.alerts.conftest import forget_alert_throttles
from tests.alerts.test_backlog import webhook  # noqa: F401

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)
TODAY = NOW.date()


@pytest.fixture
def topics():
    """'steady' (produced by team red, consumed by team blue) and 'quiet', both with
    alerts not throttled from before."""
    forget_alert_throttles()
    red, blue = Team.objects.create(name="red"), Team.objects.create(name="blue")
    factories.user("rita", team=red)
    factories.user("bert", team=blue)
    factories.user("root", admin=True)
    cluster = factories.cluster_with_brokers("sc")
    steady = factories.topic("steady", cluster, red, 1, 1)
    quiet = factories.topic("quiet", cluster, red, 1, 1)
    producer, _ = factories.app("maker", red)
    consumer, _ = factories.app("taker", blue)
    for t in (steady, quiet):
        ProducerPolicy.objects.create(topic=t, app=producer)
        ConsumerPolicy.objects.create(topic=t, app=consumer)
    return {"steady": steady, "quiet": quiet}


def traffic(topic: str, at: datetime, *counts: int) -> None:
    TrafficMinute.objects.bulk_create(
        TrafficMinute(
            dimension=TrafficMinute.Dimension.TOPIC,
            name=topic,
            minute=at + timedelta(minutes=i),
            messages=n,
            bytes=n * 100,
            latency_p50_ms=1,
            latency_p99_ms=2,
        )
        for i, n in enumerate(counts)
    )


def day_start(d: date) -> datetime:
    return datetime(d.year, d.month, d.day, tzinfo=UTC)


def history(topic: str, peaks: dict[int, int], base: int = 100) -> None:
    """``days ago → peak``: each day has ten minutes of ``base`` and one of its peak."""
    for ago, peak in peaks.items():
        traffic(
            topic, day_start(TODAY - timedelta(days=ago)) + timedelta(hours=9), *[base] * 10, peak
        )


def test_a_days_peak_leaves_out_minutes_above_five_times_its_average():
    start = day_start(TODAY - timedelta(days=1))
    # ten minutes of 100 and one of 150: average ≈ 105, so 150 is the peak
    traffic("a", start, *[100] * 10, 150)
    # ten of 100 and a spike of 10,000: average ≈ 1,000, the spike (> 5,000) is dropped
    traffic("b", start, *[100] * 10, 10_000)
    traffic("a", start + timedelta(days=1), 99_999)  # another day: not this one's
    assert surges.sum_up_day(start.date()) == 2
    peaks = dict(TopicDailyPeak.objects.values_list("topic", "peak"))
    assert peaks == {"a": 150, "b": 100}
    # summing up again replaces, never duplicates
    traffic("a", start + timedelta(hours=1), 170)
    surges.sum_up_day(start.date())
    assert TopicDailyPeak.objects.get(topic="a").peak == 170


def test_history_is_summed_up_newest_first_and_kept_thirty_days():
    for ago in range(1, 40):
        traffic("t", day_start(TODAY - timedelta(days=ago)), 100 + ago)
    TopicDailyPeak.objects.create(topic="t", day=TODAY - timedelta(days=35), peak=1)
    early = day_start(TODAY) + timedelta(minutes=5)  # yesterday has not settled yet
    done = surges.sum_up_days(early, at_most=3)
    assert done == [TODAY - timedelta(days=n) for n in (2, 3, 4)]
    assert not TopicDailyPeak.objects.filter(day__lt=TODAY - timedelta(days=30)).exists()
    while surges.sum_up_days(NOW):
        pass
    days = set(TopicDailyPeak.objects.values_list("day", flat=True))
    assert days == {TODAY - timedelta(days=n) for n in range(1, 31)}
    assert surges.sum_up_days(NOW) == []  # nothing left to do


def test_surge_alerts_the_producer_teams_once(topics, webhook):  # noqa: F811
    history("steady", {1: 400, 2: 500, 3: 600})  # average peak 500, highest 600
    # 700 > 600 × 1.3 = 780? no; 700 > 500 × 3 = 1500? no: no alert
    traffic("steady", NOW - timedelta(minutes=3), 700)
    assert surges.check_surges(NOW) == []
    traffic("steady", NOW - timedelta(minutes=2), 800)  # > 780
    (event,) = surges.check_surges(NOW)
    assert event.kind == AlertEvent.Kind.TRAFFIC_SURGE and event.target == "topic:steady"
    assert event.detail["messages"] == 800 and event.detail["highest_peak"] == 600
    assert event.team == topics["steady"].team
    assert mail.outbox[-1].to == ["rita@example.test"]
    assert webhook[-1]["kind"] == "traffic_surge"
    assert surges.check_surges(NOW) == []  # throttled


def test_receivers_are_set_on_the_topic(topics):
    steady = topics["steady"]
    history("steady", {1: 200})
    traffic("steady", NOW - timedelta(minutes=1), 1_000)
    for receiver, to in (
        ("consumer", ["bert@example.test"]),
        ("admin", ["root@example.test"]),
    ):
        redis.Redis.from_url(django_settings.REDIS_URL).delete("mqcloud:alert:surge:steady")
        steady.surge_alert_receiver = receiver
        steady.save()
        assert len(surges.check_surges(NOW)) == 1
        assert mail.outbox[-1].to == to, receiver
    redis.Redis.from_url(django_settings.REDIS_URL).delete("mqcloud:alert:surge:steady")
    steady.surge_alert_receiver = "nobody"
    steady.save()
    assert surges.check_surges(NOW) == []


def test_no_alert_below_the_minimum_without_history_or_from_long_ago(topics):
    history("quiet", {1: 10}, base=5)
    traffic("quiet", NOW - timedelta(minutes=1), 99)  # 10× its peak, but under 100
    traffic("steady", NOW - timedelta(minutes=1), 5_000)  # no history: not checked
    history("steady", {})
    traffic("quiet", NOW - timedelta(minutes=30), 5_000)  # not among the recent minutes
    assert surges.check_surges(NOW) == []
    traffic("quiet", NOW - timedelta(minutes=2), 100)
    (event,) = surges.check_surges(NOW)
    assert event.target == "topic:quiet"


def test_the_receiver_changes_by_topic_update_application(topics, client):
    from mqcloud.approvals import services
    from mqcloud.approvals.models import Application

    rita = topics["steady"].team.members.get(username="rita")
    client.force_login(rita)
    filed = client.post(
        "/applications/new/",
        {"kind": "topic_update", "code": "steady", "surge_alert_receiver": "consumer"},
    )
    assert filed.status_code == 302, filed.content.decode()[:2000]
    app = Application.objects.get(kind="topic_update")
    assert app.payload["changes"] == {"surge_alert_receiver": "consumer"}
    services.approve(app, factories.user("boss", admin=True))
    topics["steady"].refresh_from_db()
    assert topics["steady"].surge_alert_receiver == "consumer"
    page = client.get("/topics/steady/")
    assert "traffic alerts to teams of its consumers" in page.content.decode()
