"""Where a fired alert goes — e-mail to its recipients, text messages to those of them who
opted in (:class:`SmsSubscription`, through ``SMS_GATEWAY_URL``) and the
``ALERT_WEBHOOK_URL`` — who they are (a team's members, the platform admins), and how
often one fires: an alert key at most once per ``ALERT_THROTTLE_SECONDS``, shared by
every worker through Redis.

What a channel could not carry (it failed, or is paused after failing:
:mod:`~mqcloud.alerts.channels`) stays on the event and is sent again every minute by
:func:`retry_pending` for ``ALERT_RETRY_HOURS``.

The SMS gateway is any HTTP service that takes ``POST {"to": [numbers], "text": …}``
(JSON; ``Authorization: Bearer SMS_GATEWAY_TOKEN`` when that is set) — a provider's API
or a small relay in front of one; a 2xx answer counts as sent."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from datetime import timedelta
from typing import NamedTuple

import httpx
import redis
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.mail import send_mail
from django.db import transaction
from django.db.models import Count, Q, QuerySet
from django.utils import timezone

from brokers.models import ConsumerPolicy, ProducerPolicy, Team, Topic
from mqcloud.alerts import channels
from mqcloud.alerts.models import AlertEvent, SmsSubscription

log = logging.getLogger(__name__)


def platform_admins() -> QuerySet:
    """The platform admins (staff and superusers) whose accounts are on."""
    return get_user_model().objects.filter(Q(is_staff=True) | Q(is_superuser=True), is_active=True)


def copy_emails() -> list[str]:
    """The addresses of the platform admins copied on every alert (:class:`AlertCopy`)."""
    return sorted({u.email for u in platform_admins().filter(alert_copy__isnull=False) if u.email})


SMS_TEXT_MAX = 300
"""The longest text sent (a message longer than that is cut, with an ellipsis)."""


def sms_numbers(users: QuerySet | Iterable[object]) -> list[str]:
    """The numbers of those of ``users`` (a queryset or users) who opted in to text
    messages and whose accounts are on: one query."""
    rows = SmsSubscription.objects.filter(user__in=users, user__is_active=True)
    return sorted(set(rows.values_list("phone", flat=True)))


PENDING_KEYS = {"mail": "emails", "webhook": "webhook", "sms": "numbers"}
"""Each channel's key in :attr:`AlertEvent.pending`."""


def waiting_counts() -> dict[str, int]:
    """How many alerts wait for each channel (one query, on the index of the alerts that
    wait)."""
    return AlertEvent.objects.exclude(pending={}).aggregate(
        **{name: Count("pk", filter=Q(pending__has_key=key)) for name, key in PENDING_KEYS.items()}
    )


RETRY_BATCH = 200
"""The most events one run of :func:`retry_pending` sends again."""


class Sent(NamedTuple):
    """What one channel did with an alert: its status for the event, and whether it is
    to be tried again (the channel failed, or was paused)."""

    status: str
    retry: bool


def _transient(status_code: int) -> bool:
    return status_code >= 500 or status_code in (408, 429)


def _post(channel: str, url: str, payload: dict, headers: dict[str, str]) -> Sent:
    """POST ``payload`` to ``url``, unless ``channel`` is paused; a failure that may pass
    (unreachable, timeout, 5xx, 408, 429) pauses it and asks for a retry, another answer
    (a 4xx: the request itself is wrong) is final."""
    if channels.paused(channel, url):
        return Sent("deferred: failing recently", True)
    try:
        response = httpx.post(url, json=payload, headers=headers, timeout=5)
    except httpx.HTTPError as exc:
        log.warning("alert %s unreachable: %s", channel, type(exc).__name__)
        channels.pause(channel, url)
        return Sent(type(exc).__name__, True)
    if response.is_success:
        return Sent(str(response.status_code), False)
    log.warning("alert %s answered %s", channel, response.status_code)
    if _transient(response.status_code):
        channels.pause(channel, url)
        return Sent(str(response.status_code), True)
    return Sent(str(response.status_code), False)


def send_sms(numbers: Sequence[str], text: str) -> Sent:
    """Post ``text`` for ``numbers`` to the SMS gateway: what it answered, for the event
    ('' when there is no gateway or nobody to text)."""
    if not settings.SMS_GATEWAY_URL or not numbers:
        return Sent("", False)
    if len(text) > SMS_TEXT_MAX:
        text = text[: SMS_TEXT_MAX - 1] + "…"
    headers = {}
    if settings.SMS_GATEWAY_TOKEN:
        headers["Authorization"] = f"Bearer {settings.SMS_GATEWAY_TOKEN}"
    sent = _post("sms", settings.SMS_GATEWAY_URL, {"to": list(numbers), "text": text}, headers)
    if sent.status.isdigit() and not sent.retry and 200 <= int(sent.status) < 300:
        return Sent(f"sent to {len(numbers)}", False)
    return sent


def mail(subject: str, body: str, recipients: Sequence[str]) -> bool:
    """E-mail ``body`` to ``recipients`` unless the mail channel is paused; False when it
    is to be tried again (paused, or it failed now: then it is paused, for every worker)."""
    address = channels.mail_address()
    if channels.paused("mail", address):
        return False
    try:
        send_mail(subject, body, settings.DEFAULT_FROM_EMAIL, list(recipients))
    except Exception:  # what was to be sent stays where it was, to be tried again
        log.exception("could not e-mail %r", subject)
        channels.pause("mail", address)
        return False
    return True


def _send_mail(event: AlertEvent, recipients: list[str]) -> bool:
    """E-mail ``event`` to ``recipients``; False when it is to be tried again."""
    return mail(f"[mqcloud] {event.message}", event.message, recipients)


def _send(event: AlertEvent, emails: list[str], numbers: list[str], webhook: bool) -> None:
    """Send ``event`` to ``emails``, ``numbers`` and (``webhook``) the webhook; what
    failed, or waits for its channel's pause to end, is left in ``event.pending``."""
    pending: dict = {}
    if emails:
        if _send_mail(event, emails):
            event.emailed = True
        else:
            pending["emails"] = emails
    if webhook and settings.ALERT_WEBHOOK_URL:
        payload = {
            "kind": event.kind,
            "target": event.target,
            "message": event.message,
            "detail": event.detail,
            "at": event.created_at.isoformat(),
        }
        sent = _post("webhook", settings.ALERT_WEBHOOK_URL, payload, {})
        event.webhook_status = sent.status[:100]
        if sent.retry:
            pending["webhook"] = True
    if numbers:
        sent = send_sms(numbers, f"[mqcloud] {event.message}")
        event.sms_status = sent.status[:100]
        if sent.retry:
            pending["numbers"] = numbers
    event.pending = pending


def deliver(event: AlertEvent, recipients: list[str], texted: Sequence[str] = ()) -> None:
    """E-mail ``recipients`` and the admins copied on every alert, text ``texted``
    (numbers) and post to ``ALERT_WEBHOOK_URL`` (when set); what reached where is saved on
    the event, and what could not (its channel failed or is paused,
    :mod:`~mqcloud.alerts.channels`) is kept in ``event.pending`` for
    :func:`retry_pending`. A failure of any leaves the event in the history."""
    recipients = sorted({*recipients, *copy_emails()})
    _send(event, recipients, sorted(set(texted)), webhook=True)
    event.save(update_fields=["emailed", "webhook_status", "sms_status", "pending"])


def retry_pending(limit: int = RETRY_BATCH) -> int:
    """Send again what alerts could not send (oldest first, at most ``limit``; each
    event locked while it is sent, so two runs never send it twice); an event still
    pending after ``ALERT_RETRY_HOURS`` is given up (its statuses say so). How many
    events were tried."""
    cutoff = timezone.now() - timedelta(hours=settings.ALERT_RETRY_HOURS)
    expired = AlertEvent.objects.exclude(pending={}).filter(created_at__lt=cutoff)
    gave_up = f"gave up after {settings.ALERT_RETRY_HOURS:g} h"
    with transaction.atomic():  # three statements, however many gave up
        expired.filter(pending__webhook=True).update(webhook_status=gave_up)
        expired.filter(pending__has_key="numbers").update(sms_status=gave_up)
        expired.update(pending={})
    waiting = AlertEvent.objects.exclude(pending={}).select_for_update(skip_locked=True)
    tried = 0
    with transaction.atomic():
        for event in waiting.filter(created_at__gte=cutoff).order_by("created_at")[:limit]:
            was = event.pending
            _send(
                event,
                list(was.get("emails", [])),
                list(was.get("numbers", [])),
                webhook=bool(was.get("webhook")),
            )
            event.save(update_fields=["emailed", "webhook_status", "sms_status", "pending"])
            tried += 1
    return tried


def first_in_window(client: redis.Redis, key: str) -> bool:
    """Whether alert ``key`` may fire now: not fired within ``ALERT_THROTTLE_SECONDS``
    (``SET NX EX``, so one worker wins)."""
    return bool(client.set(f"mqcloud:alert:{key}", 1, nx=True, ex=settings.ALERT_THROTTLE_SECONDS))


def team_emails(team: Team) -> list[str]:
    """The addresses of ``team``'s members who have one."""
    return sorted({u.email for u in team.members.all() if u.email})


def alert_team(kind: str, target: str, team: Team, message: str, detail: dict) -> AlertEvent:
    """Record an alert for ``team`` and deliver it to the team's members (and the
    webhook): what every per-consumer and per-producer alert does once it fires."""
    event = AlertEvent.objects.create(
        kind=kind, target=target, team=team, message=message, detail=detail
    )
    deliver(event, team_emails(team), sms_numbers(team.members.all()))
    return event


def alert_admins(
    kind: str, target: str, message: str, detail: dict, recipients: list[str]
) -> AlertEvent:
    """Record an alert of no team's (the platform's) and deliver it to ``recipients`` (the
    platform admins' addresses, read once per check) and the webhook."""
    event = AlertEvent.objects.create(
        kind=kind, target=target[:300], team=None, message=message[:1000], detail=detail
    )
    deliver(event, recipients, sms_numbers(platform_admins()))
    return event


class AdminAlert(NamedTuple):
    """A platform alert (no team's) that is to fire."""

    kind: str
    target: str
    message: str
    detail: dict
    key: str | None = None
    """Its throttle key (see :func:`first_in_window`); None: it fires whenever found."""


def fire_admin_alerts(alerts: Sequence[AdminAlert]) -> list[AlertEvent]:
    """Fire each of ``alerts`` to the platform admins (their addresses read once), unless
    its key fired within the throttle window; the events that fired."""
    if not alerts:
        return []
    recipients = platform_admin_emails()
    client = redis.Redis.from_url(settings.REDIS_URL)
    fired: list[AlertEvent] = []
    try:
        for a in alerts:
            if a.key is None or first_in_window(client, a.key):
                fired.append(alert_admins(a.kind, a.target, a.message, a.detail, recipients))
    finally:
        client.close()
    return fired


def platform_admin_emails() -> list[str]:
    """The addresses of the platform admins (staff and superusers) who have one."""
    return sorted({u.email for u in platform_admins() if u.email})


def traffic_receivers(topic: Topic) -> list | None:
    """The users ``topic``'s traffic alerts go to (active ones); None: nobody."""
    receiver = topic.surge_alert_receiver
    if receiver == Topic.SurgeReceiver.NOBODY:
        return None
    if receiver == Topic.SurgeReceiver.ADMIN:
        return list(platform_admins())
    policies = ProducerPolicy if receiver == Topic.SurgeReceiver.PRODUCER else ConsumerPolicy
    teams = policies.objects.filter(topic=topic).values("app__team")
    return list(get_user_model().objects.filter(teams__in=teams, is_active=True).distinct())


class TrafficAlert(NamedTuple):
    """A traffic alert of a topic (surge, silence, a rule) that is to fire."""

    kind: str
    topic: Topic
    key: str
    """Its throttle key (see :func:`first_in_window`)."""
    message: str
    detail: dict


def fire_traffic_alerts(alerts: Iterable[TrafficAlert]) -> list[AlertEvent]:
    """Fire each of ``alerts`` to its topic's traffic-alert receiver, unless that is
    nobody or its key fired within the throttle window; the events that fired."""
    client = redis.Redis.from_url(settings.REDIS_URL)
    fired: list[AlertEvent] = []
    try:
        for alert in alerts:
            users = traffic_receivers(alert.topic)
            if users is None or not first_in_window(client, alert.key):
                continue
            event = AlertEvent.objects.create(
                kind=alert.kind,
                target=f"topic:{alert.topic.code}",
                team=alert.topic.team,
                message=alert.message,
                detail={**alert.detail, "receiver": alert.topic.surge_alert_receiver},
            )
            emails = sorted({u.email for u in users if u.email})
            deliver(event, emails, sms_numbers(users))
            fired.append(event)
    finally:
        client.close()
    return fired
