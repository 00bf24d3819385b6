"""Alert history: every alert that fired, where it was delivered."""

from __future__ import annotations

from django.db import models

from brokers.models import Team


class AlertEvent(models.Model):
    """One fired alert (repeats within the throttle window are not recorded)."""

    class Kind(models.TextChoices):
        BACKLOG = "backlog", "Consumer backlog"

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
