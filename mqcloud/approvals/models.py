"""Applications, the audit trail, in-console notifications and the approval settings."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

from brokers.models import Team
from mqcloud.approvals.secrets import redacted


class Kind(models.TextChoices):
    """What an application asks for. Each kind has a payload schema and an executor."""

    TOPIC_CREATE = "topic_create", "Create topic"
    TOPIC_UPDATE = "topic_update", "Update topic"
    TOPIC_DELETE = "topic_delete", "Delete topic"
    PRODUCER_CREATE = "producer_create", "Create producer"
    PRODUCER_DELETE = "producer_delete", "Delete producer"
    PRODUCER_UPDATE = "producer_update", "Change producer (blacklist, weights)"
    CONSUMER_CREATE = "consumer_create", "Create consumer"
    CONSUMER_DELETE = "consumer_delete", "Delete consumer"
    CONSUMER_UPDATE = "consumer_update", "Change consumer (blacklist, alert rule)"
    PAUSE = "pause", "Pause consumer"
    RESUME = "resume", "Resume consumer"
    RATE_LIMIT = "rate_limit", "Consumer rate limit"
    OFFSET_RESET = "offset_reset", "Reset consumer offsets"
    SKIP_BACKLOG = "skip_backlog", "Skip backlog"
    DLQ_RESEND = "dlq_resend", "Resend dead letters"
    RECONSUME = "reconsume", "Re-consume a time span"
    TIMER_CANCEL = "timer_cancel", "Cancel delayed or timer messages"
    ZBUS_OPEN = "zbus_open", "Open zbus access: token-less zbus clients may produce and consume"
    ZBUS_CLOSE = "zbus_close", "Close zbus access: zbus clients need an app token"
    TRAFFIC_RULE_ADD = "traffic_rule_add", "Add a topic traffic alert rule"
    TRAFFIC_RULE_DELETE = "traffic_rule_delete", "Delete a topic traffic alert rule"
    MESSAGE_EXPORT = "message_export", "Export a topic's messages of a time span"
    RETRY_SKIP = "retry_skip", "Skip a consumer's retry messages older than a time"
    BECOME_ADMIN = "become_admin", "Become an admin of a team or of the platform"


NEVER_AUTO_APPROVED = frozenset({Kind.BECOME_ADMIN})
"""Kinds a platform admin always decides: a rule that approved them automatically would
let anyone make themselves an admin."""
AUTO_APPROVABLE = [(k, label) for k, label in Kind.choices if k not in NEVER_AUTO_APPROVED]


class Status(models.TextChoices):
    PENDING = "pending", "Pending"
    EXECUTING = "executing", "Executing"
    APPROVED = "approved", "Approved and done"
    FAILED = "failed", "Approved, execution failed"
    REJECTED = "rejected", "Rejected"
    CANCELLED = "cancelled", "Cancelled"


OPEN_STATUSES = (Status.PENDING, Status.EXECUTING)


class Application(models.Model):
    """A request to change the cluster, waiting for (or past) an admin's decision."""

    kind = models.CharField(max_length=20, choices=Kind.choices)
    applicant = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="applications"
    )
    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="applications")
    payload = models.JSONField(help_text="The validated request, as the kind defines it.")
    target = models.CharField(
        max_length=300, help_text="What the application changes, e.g. consumer:app.topic."
    )
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    reason = models.TextField(blank=True, help_text="Why it was rejected.")
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="decisions",
    )
    decided_at = models.DateTimeField(null=True, blank=True)
    auto_approved = models.BooleanField(default=False)
    result = models.JSONField(default=dict, blank=True)
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            # One open application per target (e.g. one pending config change per consumer).
            models.UniqueConstraint(
                fields=["target"],
                condition=Q(status__in=["pending", "executing"]),
                name="one_open_application_per_target",
            ),
            models.CheckConstraint(
                condition=~Q(status="rejected") | ~Q(reason=""), name="rejection_has_reason"
            ),
        ]

    def __str__(self) -> str:
        return f"#{self.pk} {self.get_kind_display()} ({self.get_status_display()})"

    @property
    def shown_payload(self) -> object:
        """The payload as pages and the API show it: secrets redacted (.secrets)."""
        return redacted(self.payload)

    @property
    def is_open(self) -> bool:
        return self.status in OPEN_STATUSES


class AuditEvent(models.Model):
    """One line of the audit trail: who did what to which object, and when."""

    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="audit_events",
    )
    action = models.CharField(max_length=40)
    application = models.ForeignKey(
        Application, on_delete=models.SET_NULL, null=True, blank=True, related_name="events"
    )
    team = models.ForeignKey(Team, on_delete=models.SET_NULL, null=True, blank=True)
    target = models.CharField(max_length=300, blank=True)
    detail = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    @property
    def shown_detail(self) -> object:
        """The detail as pages and the API show it: secrets redacted (.secrets)."""
        return redacted(self.detail)

    def __str__(self) -> str:
        return f"{self.created_at:%Y-%m-%d %H:%M:%S} {self.actor} {self.action} {self.target}"


class Notification(models.Model):
    """A message to a user in the console (also sent by e-mail)."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="notifications"
    )
    application = models.ForeignKey(
        Application, on_delete=models.CASCADE, null=True, blank=True, related_name="notices"
    )
    message = models.CharField(max_length=500)
    read = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return self.message


class ApprovalSettings(models.Model):
    """Platform-wide approval switches (a single row)."""

    auto_approve = models.JSONField(
        default=list, blank=True, help_text="Application kinds approved automatically."
    )
    frozen = models.BooleanField(
        default=False, help_text="Stop all approvals (maintenance); submissions still queue."
    )

    class Meta:
        verbose_name_plural = "approval settings"
        constraints = [models.CheckConstraint(condition=Q(id=1), name="approval_settings_single")]

    def __str__(self) -> str:
        return "approval settings"

    @classmethod
    def current(cls) -> ApprovalSettings:
        obj, _ = cls.objects.get_or_create(id=1)
        return obj

    def clean(self) -> None:
        from django.core.exceptions import ValidationError

        allowed = [k for k, _ in AUTO_APPROVABLE]
        if not isinstance(self.auto_approve, list) or any(
            k not in allowed for k in self.auto_approve
        ):
            raise ValidationError({"auto_approve": f"Choose among: {', '.join(allowed)}."})
