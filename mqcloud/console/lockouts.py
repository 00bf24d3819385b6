"""Failed logins in the audit trail, and the platform admins' page to unlock.

django-axes counts failed logins per username and per client address and refuses logins
past ``LOGIN_FAILURE_LIMIT`` (settings). Here every failure and every lockout becomes a
line of the audit trail (``login-failed`` / ``login-locked-out``, target
``user:<username>``, the address in the detail; the password is never recorded), and
``/lockouts/`` lists the attempts axes keeps, with an audited Unlock for each.
"""

from __future__ import annotations

from axes.models import AccessAttempt
from axes.signals import user_locked_out
from axes.utils import reset
from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.contrib.auth.signals import user_login_failed
from django.db.models import Q
from django.dispatch import receiver
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from mqcloud.approvals.services import record
from mqcloud.console import access
from mqcloud.console.listing import Filter, ListSpec, paginate

USERNAME_LIMIT = 150
LOCKOUTS = ListSpec(
    sorts={
        "failures": ["failures_since_start", "attempt_time"],
        "time": ["attempt_time"],
        "username": ["username"],
        "address": ["ip_address"],
    },
    default_sort="-failures",
    search=("username", "ip_address"),
    filters=(
        Filter(
            "state",
            "State",
            states={
                "locked": Q(failures_since_start__gte=settings.AXES_FAILURE_LIMIT),
                "counting": Q(failures_since_start__lt=settings.AXES_FAILURE_LIMIT),
            },
        ),
    ),
    search_label="Search username or address",
)


def _address(request: HttpRequest | None) -> str:
    address = getattr(request, "axes_ip_address", None) if request is not None else None
    return address or (request.META.get("REMOTE_ADDR", "") if request is not None else "")


@receiver(user_login_failed, dispatch_uid="mqcloud-audit-login-failed")
def audit_failed_login(
    sender: object, credentials: dict, request: HttpRequest | None = None, **kwargs: object
) -> None:
    """A failed login: who was tried, from where."""
    username = str(credentials.get("username", ""))[:USERNAME_LIMIT].replace("\x00", "")
    record(
        None,
        "login-failed",
        f"user:{username}",
        detail={"username": username, "address": _address(request)},
    )


@receiver(user_locked_out, dispatch_uid="mqcloud-audit-locked-out")
def audit_lockout(
    sender: object, request: HttpRequest, username: str | None, ip_address: str, **kwargs: object
) -> None:
    """A username or an address crossed the failure limit."""
    name = str(username or "")[:USERNAME_LIMIT].replace("\x00", "")
    record(
        None,
        "login-locked-out",
        f"user:{name}",
        detail={
            "username": name,
            "address": ip_address,
            "failure_limit": settings.AXES_FAILURE_LIMIT,
        },
    )


@login_required
def lockout_list(request: HttpRequest) -> HttpResponse:
    """Failed-login records (platform admins): locked ones first, searched, filtered and
    paged on the server."""
    access.require_platform_admin(request.user)
    listing = paginate(request, AccessAttempt.objects.all(), LOCKOUTS)
    return render(
        request,
        "console/lockouts.html",
        {"listing": listing, "limit": settings.AXES_FAILURE_LIMIT},
    )


@login_required
@require_POST
def lockout_unlock(request: HttpRequest, pk: int) -> HttpResponse:
    """Forget one record's failures: its username and address may log in again."""
    access.require_platform_admin(request.user)
    attempt = get_object_or_404(AccessAttempt, pk=pk)
    username, address = attempt.username or "", attempt.ip_address or ""
    removed = reset(username=username or None) if username else 0
    removed += reset(ip=address or None) if address else 0
    record(
        request.user,
        "login-unlocked",
        f"user:{username}",
        detail={"username": username, "address": address, "records": removed},
    )
    messages.success(request, f"Unlocked {username or address}.")
    return redirect("console:lockouts")
