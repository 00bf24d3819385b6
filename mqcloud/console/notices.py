"""In-console notifications, the audit trail, and alerts (rules and history) — each list
searched, filtered, sorted and paged on the server (:mod:`mqcloud.console.listing`) —
the platform admins' choice to be copied on every alert, and the alert channels' state
(paused after a failure, what waits for them) with the admins' "resume now"."""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.db.models import Q
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from mqcloud.alerts.delivery import copy_emails
from mqcloud.alerts.models import PHONE, AlertCopy, AlertEvent, SmsSubscription
from mqcloud.approvals.models import AuditEvent, Notification
from mqcloud.approvals.services import record
from mqcloud.console import access, alert_channels
from mqcloud.console.listing import Filter, ListSpec, paginate
from mqcloud.console.topics import team_choices

PAGE = 50
NOTIFICATIONS = ListSpec(
    sorts={"created": ["created_at"]},
    default_sort="-created",
    search=("message",),
    filters=(Filter("state", "State", states={"unread": Q(read=False), "read": Q(read=True)}),),
    per_page=PAGE,
    search_label="Search messages",
)
AUDIT = ListSpec(
    sorts={
        "created": ["created_at"],
        "action": ["action"],
        "target": ["target"],
        "actor": ["actor__username"],
        "team": ["team__name"],
    },
    default_sort="-created",
    search=("target", "action", "actor__username"),
    filters=(
        Filter("team", "Team", lookup="team__name"),
        Filter("action", "Action", lookup="action"),
        Filter("actor", "Who", lookup="actor__username"),
    ),
    per_page=PAGE,
    search_label="Search target, action or user",
)
ALERTS = ListSpec(
    sorts={"created": ["created_at"], "target": ["target"], "team": ["team__name"]},
    default_sort="-created",
    search=("target", "message"),
    filters=(
        Filter("team", "Team", lookup="team__name"),
        Filter("kind", "Kind", lookup="kind", choices=tuple(AlertEvent.Kind.choices)),
    ),
    per_page=PAGE,
    search_label="Search target or message",
)
RULES = ListSpec(
    sorts={
        "name": ["name"],
        "team": ["app__team__name"],
        "threshold": ["backlog_alert_count"],
    },
    default_sort="name",
    search=("name", "topic__code", "app__code"),
    filters=(
        Filter("team", "Team", lookup="app__team__name"),
        Filter(
            "rule",
            "Rule",
            states={"on": Q(backlog_alert_enabled=True), "off": Q(backlog_alert_enabled=False)},
        ),
    ),
    per_page=25,
    prefix="r_",
    search_label="Search consumer, topic or app",
)


@login_required
def notifications(request: HttpRequest) -> HttpResponse:
    rows = Notification.objects.filter(user=request.user).select_related("application")
    return render(
        request, "console/notifications.html", {"listing": paginate(request, rows, NOTIFICATIONS)}
    )


@login_required
@require_POST
def notifications_read(request: HttpRequest) -> HttpResponse:
    Notification.objects.filter(user=request.user, read=False).update(read=True)
    return redirect("console:notifications")


@login_required
def audit(request: HttpRequest) -> HttpResponse:
    """The audit trail of the user's teams and of the user's own actions (everything for
    platform admins)."""
    rows = AuditEvent.objects.select_related("actor", "team", "application")
    if not access.is_platform_admin(request.user):
        rows = rows.filter(Q(team__in=access.user_teams(request.user)) | Q(actor=request.user))
    target = request.GET.get("target", "").replace("\x00", "").strip()[:300]
    if target:  # the older bookmarkable filter: a part of the target
        rows = rows.filter(target__icontains=target)
    listing = paginate(request, rows, AUDIT, choices={"team": team_choices(request.user)})
    return render(request, "console/audit.html", {"listing": listing, "target": target})


@login_required
@require_POST
def alert_copies(request: HttpRequest) -> HttpResponse:
    """A platform admin asks to be copied on every alert, or no longer (``copy``: on or
    off); audited."""
    access.require_platform_admin(request.user)
    back = f"{reverse('console:alerts')}#platform-alerts"
    choice = request.POST.get("copy")
    if choice not in ("on", "off"):
        messages.error(request, "Choose on or off.")
        return redirect(back)
    wanted = choice == "on"
    if wanted:
        AlertCopy.objects.get_or_create(user=request.user)
    else:
        AlertCopy.objects.filter(user=request.user).delete()
    record(
        request.user,
        "alert-copies-on" if wanted else "alert-copies-off",
        f"user:{request.user.get_username()}",
    )
    messages.success(
        request,
        "You are copied on every alert." if wanted else "You are no longer copied on alerts.",
    )
    return redirect(back)


@login_required
@require_POST
def alert_sms(request: HttpRequest) -> HttpResponse:
    """The user's own text-message opt-in: a number (``phone``) to text its alerts to, or
    none (empty: opted out); audited without the number."""
    back = f"{reverse('console:alerts')}#sms-alerts"
    phone = request.POST.get("phone", "").strip().replace(" ", "")
    if not phone:
        SmsSubscription.objects.filter(user=request.user).delete()
        record(request.user, "sms-alerts-off", f"user:{request.user.get_username()}")
        messages.success(request, "Your alerts are no longer texted to you.")
        return redirect(back)
    try:
        PHONE(phone)
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
        return redirect(back)
    SmsSubscription.objects.update_or_create(user=request.user, defaults={"phone": phone})
    record(request.user, "sms-alerts-on", f"user:{request.user.get_username()}")
    messages.success(request, f"Your alerts are texted to …{phone[-4:]}.")
    return redirect(back)


@login_required
def alerts(request: HttpRequest) -> HttpResponse:
    """Alert rules of the user's consumers, and the alerts that fired."""
    is_admin = access.is_platform_admin(request.user)
    history = AlertEvent.objects.select_related("team")
    if not is_admin:
        history = history.filter(team__in=access.user_teams(request.user))
    teams = {"team": team_choices(request.user)}
    rules = paginate(request, access.consumers_for(request.user), RULES, choices=teams)
    return render(
        request,
        "console/alerts.html",
        {
            "listing": paginate(request, history, ALERTS, choices=teams),
            "rules": rules,
            "failure_default": settings.CONSUME_FAILURE_ALERT_PER_HOUR,
            "blocked_s": f"{settings.CONSUMER_BLOCKED_ALERT_S:g}",
            "refusal_threshold": settings.PRODUCE_REFUSAL_ALERT_PER_HOUR,
            "offset_moves": settings.OFFSET_MOVE_ALERT_PER_HOUR,
            "silence_watched": access.topics_for(request.user)
            .filter(silence_alert_minutes__gt=0)
            .count(),
            "rules_watched": access.topics_for(request.user)
            .filter(traffic_rules__isnull=False)
            .distinct()
            .count(),
            "is_admin": is_admin,
            "copied": is_admin and AlertCopy.objects.filter(user=request.user).exists(),
            "copied_admins": copy_emails() if is_admin else [],
            "store_slow": (settings.STORE_SLOW_MAX_MS, settings.STORE_SLOW_P99_MS),
            "replica_lag_bytes": settings.REPLICA_LAG_ALERT_BYTES,
            "sms_gateway": bool(settings.SMS_GATEWAY_URL),
            "sms": SmsSubscription.objects.filter(user=request.user).first(),
            "channels": alert_channels.rows() if is_admin else [],
            "channel_pause_s": settings.ALERT_CHANNEL_PAUSE_SECONDS,
        },
    )


@login_required
@require_POST
def alert_channel_resume(request: HttpRequest) -> HttpResponse:
    """A platform admin ends a channel's pause (it is fixed): what waits for it is sent by
    the next minute's retry run; audited."""
    access.require_platform_admin(request.user)
    back = f"{reverse('console:alerts')}#alert-channels"
    found = alert_channels.resume(request.user, request.POST.get("channel", ""))
    if found is None:
        messages.error(request, "Choose one of the configured alert channels.")
        return redirect(back)
    messages.success(
        request,
        f"{found.label} ({found.shown_address}) is tried again: what waits for it goes "
        "within a minute.",
    )
    return redirect(back)
