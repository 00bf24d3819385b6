"""Traffic-surge alerts: a topic producing far beyond its usual daily peaks alerts whoever
its ``surge_alert_receiver`` names — the teams of its producers or of its consumers, the
platform admins, or nobody.

The history is one row per topic and UTC day (:class:`~mqcloud.alerts.models.
TopicDailyPeak`): the day's busiest minute once the outliers are left out — minutes above
5 × the day's per-minute average (over the minutes with traffic) are dropped first. Days
are computed from the pipeline's per-minute rollup (``TrafficMinute``) in one SQL
statement per day for every topic at once, and kept :data:`HISTORY_DAYS`.

A check (beat: every 5 minutes) takes each topic's busiest minute of the last
:data:`RECENT_MINUTES` (the rollup runs a little behind) and alerts when it exceeds the
average daily peak × 3, or the highest daily peak × 1.3 — and is at least
:data:`MIN_MESSAGES`. A topic without a day of history is not checked. Two queries
whatever the number of topics; recipients are looked up only for the topics that fire,
and an alert key fires at most once per ``ALERT_THROTTLE_SECONDS``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

from django.db import connection, transaction
from django.db.models import Avg, Count, Max

from brokers.models import Topic
from mqcloud.alerts.delivery import TrafficAlert, fire_traffic_alerts
from mqcloud.alerts.models import AlertEvent, TopicDailyPeak
from pipeline.models import TrafficMinute

HISTORY_DAYS = 30
OUTLIER_FACTOR = 5
AVERAGE_FACTOR = 3.0
HIGHEST_FACTOR = 1.3
MIN_MESSAGES = 100
RECENT_MINUTES = 10
DAYS_PER_RUN = 4
SETTLE = timedelta(minutes=15)
"""A day is summed up this long after it ends, when the rollup has caught up with it."""

_PEAKS_OF_DAY = """
INSERT INTO {peaks} (topic, day, peak)
SELECT name, %s, MAX(messages) FILTER (WHERE messages <= %s * average)
FROM (
    SELECT name, messages, AVG(messages) OVER (PARTITION BY name) AS average
    FROM {traffic}
    WHERE dimension = %s AND minute >= %s AND minute < %s
) AS minutes
GROUP BY name
ON CONFLICT (topic, day) DO UPDATE SET peak = EXCLUDED.peak
"""


def _start_of(day: date) -> datetime:
    return datetime(day.year, day.month, day.day, tzinfo=UTC)


def sum_up_day(day: date) -> int:
    """Write every topic's peak of ``day`` (UTC) from the rollup; how many topics."""
    sql = _PEAKS_OF_DAY.format(
        peaks=connection.ops.quote_name(TopicDailyPeak._meta.db_table),
        traffic=connection.ops.quote_name(TrafficMinute._meta.db_table),
    )
    start = _start_of(day)
    params = [day, OUTLIER_FACTOR, TrafficMinute.Dimension.TOPIC, start, start + timedelta(days=1)]
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.rowcount


def sum_up_days(now: datetime, *, at_most: int = DAYS_PER_RUN) -> list[date]:
    """Sum up the settled days of the last HISTORY_DAYS not summed up yet, newest first
    and ``at_most`` per run (a first run at fleet size fills the history over a few
    checks instead of holding one up), and forget older ones; the days summed up. A day
    without a row (no topic had traffic) is looked at again, cheaply."""
    today = now.astimezone(UTC).date()
    last = today - timedelta(days=1)
    if now - _start_of(today) < SETTLE:
        last -= timedelta(days=1)
    first = today - timedelta(days=HISTORY_DAYS)
    TopicDailyPeak.objects.filter(day__lt=first).delete()
    done = set(
        TopicDailyPeak.objects.filter(day__gte=first).values_list("day", flat=True).distinct()
    )
    days = [first + timedelta(days=n) for n in range((last - first).days + 1)]
    todo = [d for d in reversed(days) if d not in done][:at_most]
    for day in todo:
        sum_up_day(day)
    return todo


@dataclass(frozen=True)
class Surge:
    """A topic producing beyond its history."""

    topic: str
    messages: int
    minute: datetime
    average_peak: float
    highest_peak: int
    days: int

    @property
    def threshold(self) -> float:
        return min(self.average_peak * AVERAGE_FACTOR, self.highest_peak * HIGHEST_FACTOR)


def find_surges(now: datetime) -> list[Surge]:
    """Topics whose busiest recent minute exceeds their thresholds (two queries)."""
    since = now - timedelta(minutes=RECENT_MINUTES)
    recent = TrafficMinute.objects.filter(
        dimension=TrafficMinute.Dimension.TOPIC, minute__gte=since, messages__gte=MIN_MESSAGES
    ).order_by("name", "-messages", "-minute")
    busiest = {
        name: (messages, minute)
        for name, messages, minute in recent.distinct("name").values_list(
            "name", "messages", "minute"
        )
    }
    if not busiest:
        return []
    history = (
        TopicDailyPeak.objects.filter(topic__in=list(busiest))
        .values("topic")
        .annotate(average=Avg("peak"), highest=Max("peak"), days=Count("day"))
    )
    found = []
    for row in history:
        messages, minute = busiest[row["topic"]]
        surge = Surge(
            row["topic"], messages, minute, float(row["average"]), row["highest"], row["days"]
        )
        if messages > surge.threshold:
            found.append(surge)
    return sorted(found, key=lambda s: s.topic)


def check_surges(now: datetime | None = None) -> list[AlertEvent]:
    """Sum up the days that are due, then alert for every topic that surges."""
    now = now or datetime.now(UTC)
    sum_up_days(now)
    surges = find_surges(now)
    if not surges:
        return []
    topics = Topic.objects.select_related("team").in_bulk(
        [s.topic for s in surges], field_name="code"
    )
    return fire_traffic_alerts(
        TrafficAlert(
            AlertEvent.Kind.TRAFFIC_SURGE,
            topic,
            f"surge:{topic.code}",
            (
                f"Traffic surge on {topic.code}: {surge.messages} messages in the minute"
                f" {surge.minute:%Y-%m-%d %H:%M} UTC, over {surge.threshold:.0f} (its"
                f" {surge.days}-day average peak {surge.average_peak:.0f}, highest"
                f" {surge.highest_peak})"
            ),
            {
                "messages": surge.messages,
                "minute": surge.minute.isoformat(),
                "average_peak": surge.average_peak,
                "highest_peak": surge.highest_peak,
                "days": surge.days,
            },
        )
        for surge in surges
        if (topic := topics.get(surge.topic)) is not None  # not deleted since rolled up
    )
