"""Alert history: every alert that fired, where it was delivered; the latest measured lag;
topics' own traffic rules; the platform admins copied on every alert."""

from __future__ import annotations

from django.conf import settings
from django.core.validators import RegexValidator
from django.db import models
from django.db.models import Q

from brokers.models import ConsumerPolicy, Team, Topic
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
        TRAFFIC_RULE = "traffic_rule", "Traffic rule"
        RETENTION_LOSS = "retention_loss", "Messages lost to retention"
        PROCESS_EXIT = "process_exit", "Process died and restarted"
        PROXY_DOWN = "proxy_down", "HTTP-MQ proxy down"
        STORE_SLOW = "store_slow", "Store writes slow"
        REPLICA_LAG = "replica_lag", "Store replica behind"
        LAG_BYTES = "lag_bytes", "Consumer behind by bytes"
        OFFSET_MOVED = "offset_moved", "Consumer offset moved"

    kind = models.CharField(max_length=20, choices=Kind.choices)
    target = models.CharField(max_length=300, help_text="e.g. consumer:app.topic")
    team = models.ForeignKey(Team, on_delete=models.SET_NULL, null=True, blank=True)
    message = models.CharField(max_length=1000)
    detail = models.JSONField(default=dict, blank=True)
    emailed = models.BooleanField(default=False)
    webhook_status = models.CharField(max_length=100, blank=True)
    sms_status = models.CharField(
        max_length=100, blank=True, help_text="What the SMS gateway answered ('': not sent)."
    )
    pending = models.JSONField(
        default=dict,
        blank=True,
        help_text="What is still to be sent, because its channel failed or was paused: "
        '{"emails": [...], "numbers": [...], "webhook": true} (empty: nothing).',
    )
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["target", "-created_at"], name="alert_target_recent"),
            # the retry task's scan: the few events with something still to send
            models.Index(fields=["created_at"], condition=~Q(pending={}), name="alert_pending"),
        ]

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


MAX_RULES_PER_TOPIC = 20
"""The most traffic rules one topic has."""


def measures_change(operand: str) -> bool:
    """Whether a traffic rule's operand is a change in percent (``ratio_*``), not a count."""
    return operand.startswith("ratio")


class TrafficRule(models.Model):
    """A topic's own traffic alert rule (:mod:`mqcloud.alerts.rules`): a count of the
    messages produced over a window, or its change against the window before, compared
    with a threshold, checked every few minutes within an optional daily time window."""

    class Operand(models.TextChoices):
        COUNT_5M = "count_5m", "messages in 5 minutes"
        COUNT_1H = "count_1h", "messages in an hour"
        COUNT_1D = "count_1d", "messages in a day"
        RATIO_5M = "ratio_5m", "change against the 5 minutes before (%)"
        RATIO_1H = "ratio_1h", "change against the hour before (%)"
        RATIO_1D = "ratio_1d", "change against the day before (%)"

    class Operator(models.TextChoices):
        GT = "gt", ">"
        GTE = "gte", "≥"
        LT = "lt", "<"
        LTE = "lte", "≤"

    topic = models.ForeignKey(Topic, on_delete=models.CASCADE, related_name="traffic_rules")
    operand = models.CharField(max_length=8, choices=Operand.choices)
    operator = models.CharField(max_length=3, choices=Operator.choices)
    threshold = models.FloatField(
        help_text="Messages for a count; a percentage (−100 or more) for a change."
    )
    every_minutes = models.PositiveIntegerField(
        default=5, help_text="How often the rule is checked (1–1440 minutes)."
    )
    active_from = models.TimeField(
        null=True, blank=True, help_text="Checked only from this time of day…"
    )
    active_to = models.TimeField(
        null=True, blank=True, help_text="…until this one; past midnight when earlier."
    )
    time_zone = models.CharField(
        max_length=64,
        default="UTC",
        help_text="The IANA time zone the daily window is in (e.g. Asia/Shanghai).",
    )
    checked_at = models.DateTimeField(null=True, blank=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["topic", "id"]

    def __str__(self) -> str:
        return self.describe()

    @property
    def is_change(self) -> bool:
        return measures_change(self.operand)

    def describe(self) -> str:
        """The rule as a sentence: ``messages in 5 minutes < 10, every 5 min``."""
        unit = "%" if self.is_change else ""
        text = (
            f"{self.get_operand_display()} {self.get_operator_display()} "
            f"{self.threshold:g}{unit}, every {self.every_minutes} min"
        )
        if self.active_from is not None and self.active_to is not None:
            text += f", {self.active_from:%H:%M}–{self.active_to:%H:%M} {self.time_zone}"
        return text


class AlertCopy(models.Model):
    """A platform admin copied on every alert, whoever it is for (console-features "Alert
    copies"). Only platform admins are copied: a row left by one who is no longer an
    admin is ignored."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="alert_copy"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return str(self.user)


PHONE = RegexValidator(
    r"^\+[1-9][0-9]{6,14}$", "An international number: + and 7 to 15 digits, e.g. +8613800138000."
)


class SmsSubscription(models.Model):
    """A user who wants its alerts as text messages too (console-features "Alert
    channels": SMS, per-user opt-in), at ``phone``: the alerts of its teams, and for a
    platform admin the platform's. Sent through ``SMS_GATEWAY_URL`` when it is set."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="sms_subscription"
    )
    phone = models.CharField(max_length=16, validators=[PHONE])
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"{self.user} ({self.masked})"

    @property
    def masked(self) -> str:
        """The number as pages show it: its last 4 digits."""
        return f"…{self.phone[-4:]}"
