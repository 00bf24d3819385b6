"""Alert history: every alert that fired, where it was delivered; the latest measured lag."""

from __future__ import annotations

from django.db import models

from brokers.models import ConsumerPolicy, Team
from brokers.topic_codes import STORED_TOPIC_MAX


class AlertEvent(models.Model):
    """One fired alert (repeats within the throttle window are not recorded)."""

    class Kind(models.TextChoices):
        BACKLOG = "backlog", "Consumer backlog"
        BROKER_DOWN = "broker_down", "Broker down"
        DEAD_LETTERS = "dead_letters", "Dead letters"
        CONSUME_FAILURES = "consume_failures", "Consume failures"
        CONSUMER_BLOCKED = "consumer_blocked", "Consumer blocked"
        PRODUCE_REFUSALS = "produce_refusals", "Produce refusals"
        TRAFFIC_SURGE = "traffic_surge", "Traffic surge"
        TRAFFIC_SILENCE = "traffic_silence", "Traffic stopped"

    kind = models.CharField(max_length=20, choices=Kind.choices)
    target = models.CharField(max_length=300, help_text="e.g. consumer:app.topic")
    team = models.ForeignKey(Team, on_delete=models.SET_NULL, null=True, blank=True)
    message = models.CharField(max_length=1000)
    detail = models.JSONField(default=dict, blank=True)
    emailed = models.BooleanField(default=False)
    webhook_status = models.CharField(max_length=100, blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return self.message


class LatestLag(models.Model):
    """The lag of one consumer policy when the backlog check last measured it.

    Written by :func:`mqcloud.alerts.backlog.check_backlogs` for every consumer it checks,
    so the dashboard's "furthest behind" and a lag sort over thousands of consumers are one
    indexed query instead of an engine call per consumer on the request.
    """

    consumer = models.OneToOneField(
        ConsumerPolicy, on_delete=models.CASCADE, primary_key=True, related_name="latest_lag"
    )
    lag = models.BigIntegerField(help_text="Messages stored and not yet acknowledged.")
    oldest_age_s = models.FloatField(
        null=True, blank=True, help_text="Age of the oldest unacknowledged message, if any."
    )
    measured_at = models.DateTimeField()

    class Meta:
        indexes = [models.Index(fields=["-lag"], name="alerts_latest_lag_desc")]

    def __str__(self) -> str:
        return f"{self.consumer_id}: {self.lag}"


class TopicDailyPeak(models.Model):
    """A topic's busiest minute of one UTC day, its outliers left out: the history the
    traffic-surge check compares the present with (:mod:`mqcloud.alerts.surges`)."""

    topic = models.CharField(max_length=STORED_TOPIC_MAX)
    day = models.DateField()
    peak = models.BigIntegerField(
        help_text="The day's largest per-minute message count of those at most 5 × the"
        " day's per-minute average."
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["topic", "day"], name="alerts_peak_once_per_day")
        ]
        indexes = [models.Index(fields=["day"], name="alerts_peak_day")]

    def __str__(self) -> str:
        return f"{self.topic} {self.day}: {self.peak}"
