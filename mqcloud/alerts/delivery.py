"""Where a fired alert goes: e-mail to its recipients and the ``ALERT_WEBHOOK_URL``."""

from __future__ import annotations

import logging

import httpx
from django.conf import settings
from django.core.mail import send_mail

from mqcloud.alerts.models import AlertEvent

log = logging.getLogger(__name__)


def deliver(event: AlertEvent, recipients: list[str]) -> None:
    """E-mail ``recipients`` and post to ``ALERT_WEBHOOK_URL`` (when set); what reached
    where is saved on the event. A failure of either leaves the event in the history."""
    if recipients:
        try:
            send_mail(
                f"[mqcloud] {event.message}", event.message, settings.DEFAULT_FROM_EMAIL, recipients
            )
            event.emailed = True
        except Exception:  # the alert stays in the history even when mail is down
            log.exception("could not e-mail alert %s", event.pk)
    if settings.ALERT_WEBHOOK_URL:
        payload = {
            "kind": event.kind,
            "target": event.target,
            "message": event.message,
            "detail": event.detail,
            "at": event.created_at.isoformat(),
        }
        try:
            response = httpx.post(settings.ALERT_WEBHOOK_URL, json=payload, timeout=5)
            event.webhook_status = str(response.status_code)
        except httpx.HTTPError as exc:
            event.webhook_status = type(exc).__name__
    event.save(update_fields=["emailed", "webhook_status"])
