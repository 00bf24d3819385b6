"""In-console notifications, the audit trail, and alerts (rules and history)."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.db.models import Q
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from mqcloud.alerts.models import AlertEvent
from mqcloud.approvals.models import AuditEvent, Notification
from mqcloud.console import access

PAGE = 50


@login_required
def notifications(request: HttpRequest) -> HttpResponse:
    rows = Notification.objects.filter(user=request.user).select_related("application")
    page = Paginator(rows, PAGE).get_page(request.GET.get("page"))
    return render(request, "console/notifications.html", {"page": page})


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
    target = request.GET.get("target", "").strip()[:300]
    if target:
        rows = rows.filter(target__icontains=target)
    page = Paginator(rows, PAGE).get_page(request.GET.get("page"))
    return render(request, "console/audit.html", {"page": page, "target": target})


@login_required
def alerts(request: HttpRequest) -> HttpResponse:
    """Backlog alert rules of the user's consumers, and the alerts that fired."""
    history = AlertEvent.objects.select_related("team")
    consumers = access.consumers_for(request.user).order_by("name")
    if not access.is_platform_admin(request.user):
        history = history.filter(team__in=access.user_teams(request.user))
    page = Paginator(history, PAGE).get_page(request.GET.get("page"))
    return render(request, "console/alerts.html", {"page": page, "consumers": consumers})
