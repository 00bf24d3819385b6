"""The console's own records (console-features "Favorites, notices, feedback" and "daily
capacity report"): the topics a user starred, the feedback users send the platform admins
with the answer they got, the platform admins' announcements to everyone, and the daily
capacity reports. The catalog itself lives in :mod:`brokers.models`."""

from __future__ import annotations

from django.conf import settings
from django.db import models

FAVORITES_MAX = 500
"""The most topics one user may star."""
FEEDBACK_TEXT_MAX = 4000
FEEDBACK_ANSWER_MAX = 4000
FEEDBACK_PER_HOUR = 10
"""Feedback one user may send in an hour."""
ANNOUNCEMENT_TEXT_MAX = 1000


class FavoriteTopic(models.Model):
    """A topic a user starred: listed first on its dashboard and filterable on the topic
    list. Shown only while the user may still see the topic."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="favorite_topics"
    )
    topic = models.ForeignKey(
        "brokers.Topic", on_delete=models.CASCADE, related_name="favorited_by"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["topic__code", "pk"]
        constraints = [
            models.UniqueConstraint(fields=["user", "topic"], name="favorite_topic_once")
        ]

    def __str__(self) -> str:
        return f"{self.user} ★ {self.topic}"


class Feedback(models.Model):
    """What a user told the platform admins, and the answer one of them gave."""

    class State(models.TextChoices):
        OPEN = "open", "Open"
        ANSWERED = "answered", "Answered"

    author = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="feedback",
    )
    text = models.TextField(max_length=FEEDBACK_TEXT_MAX)
    page = models.CharField(
        max_length=300, blank=True, help_text="The console page it was sent from, if any."
    )
    state = models.CharField(max_length=10, choices=State.choices, default=State.OPEN)
    answer = models.TextField(max_length=FEEDBACK_ANSWER_MAX, blank=True)
    answered_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="answered_feedback",
    )
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    answered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-pk"]
        verbose_name_plural = "feedback"

    def __str__(self) -> str:
        return f"feedback #{self.pk} by {self.author}"


class Announcement(models.Model):
    """A platform admins' notice to every console user (maintenance, an upgrade): a banner
    on every page from ``starts_at`` until ``ends_at`` (none: until withdrawn) or until
    it is withdrawn."""

    class Level(models.TextChoices):
        INFO = "info", "Information"
        WARNING = "warning", "Warning"

    text = models.CharField(max_length=ANNOUNCEMENT_TEXT_MAX)
    level = models.CharField(max_length=10, choices=Level.choices, default=Level.INFO)
    starts_at = models.DateTimeField()
    ends_at = models.DateTimeField(null=True, blank=True)
    withdrawn_at = models.DateTimeField(null=True, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="announcements",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-starts_at", "-pk"]
        indexes = [
            models.Index(
                fields=["starts_at"],
                name="announcement_live",
                condition=models.Q(withdrawn_at__isnull=True),
            )
        ]

    def __str__(self) -> str:
        return f"announcement #{self.pk}"


class CapacityReport(models.Model):
    """The platform's capacity on one UTC day (:mod:`mqcloud.console.capacity`): the
    store's memory per master node, and per cluster its topics, partitions, messages
    stored and the day's produced messages and bytes; made after the day ends (or, for
    the current day, on demand: then ``partial``)."""

    day = models.DateField(unique=True)
    partial = models.BooleanField(default=False, help_text="Made before the day ended.")
    store = models.JSONField(default=list, help_text="[{name, used_bytes, max_bytes, keys}]")
    clusters = models.JSONField(
        default=list,
        help_text="[{cluster, topics, partitions, stored_messages, produced_messages, "
        "produced_bytes}]",
    )
    top_topics = models.JSONField(
        default=list, help_text="The topics storing the most messages: [{code, cluster, stored}]"
    )
    created_at = models.DateTimeField(auto_now=True)
    emailed_at = models.DateTimeField(
        null=True, blank=True, help_text="When it was e-mailed to the platform admins."
    )

    class Meta:
        ordering = ["-day"]

    def __str__(self) -> str:
        return f"capacity {self.day}"
