"""Announcements (console-features "notices"): a platform admin posts a notice to every
console user — maintenance, an upgrade, a deprecation — shown as a banner on every page
while it runs (from its start until its end, or until withdrawn). A user may hide one for
the rest of its session. ``/announcements/`` lists them all; platform admins post and
withdraw there (audited: ``announcement-posted``, ``announcement-withdrawn``), and the REST
API offers the same (``/api/v1/announcements/``) through :func:`post` and :func:`withdraw`.
"""

from __future__ import annotations

from datetime import datetime
from functools import partial

from django import forms
from django.contrib import messages
from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.db.models import Q, QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from mqcloud.approvals.services import record
from mqcloud.console import access
from mqcloud.console.listing import Filter, ListSpec, paginate
from mqcloud.console.models import ANNOUNCEMENT_TEXT_MAX, Announcement
from mqcloud.console.user_input import clean_message, console_path

SHOWN = 5
"""The most banners a page shows (the newest running ones)."""
HIDDEN_KEY = "mqcloud_hidden_announcements"
"""The ids a user hid, in its session."""
HIDDEN_MAX = 50


STATES = ("scheduled", "running", "ended", "withdrawn")


def in_state(name: str, now: datetime | None = None) -> Q:
    """The condition of the announcements in state ``name`` (one of :data:`STATES`) now."""
    now = now or timezone.now()
    live = Q(withdrawn_at__isnull=True)
    return {
        "scheduled": live & Q(starts_at__gt=now),
        "running": live & Q(starts_at__lte=now) & (Q(ends_at__isnull=True) | Q(ends_at__gt=now)),
        "ended": live & Q(starts_at__lte=now, ends_at__lte=now),
        "withdrawn": Q(withdrawn_at__isnull=False),
    }[name]


def running(now: datetime | None = None) -> QuerySet[Announcement]:
    """The announcements running now, newest first."""
    return Announcement.objects.filter(in_state("running", now)).order_by("-starts_at", "-pk")


def state(item: Announcement, now: datetime | None = None) -> str:
    """'scheduled', 'running', 'ended' or 'withdrawn'."""
    now = now or timezone.now()
    if item.withdrawn_at is not None:
        return "withdrawn"
    if item.starts_at > now:
        return "scheduled"
    if item.ends_at is not None and item.ends_at <= now:
        return "ended"
    return "running"


def post(
    admin: AbstractBaseUser,
    text: object,
    level: str = Announcement.Level.INFO,
    starts_at: datetime | None = None,
    ends_at: datetime | None = None,
) -> Announcement:
    """Post an announcement (platform admins). ValidationError for a bad text, level or
    times (an end before the start, or already past)."""
    access.require_platform_admin(admin)
    clean = clean_message(text, ANNOUNCEMENT_TEXT_MAX, "announcement")
    if level not in Announcement.Level.values:
        raise ValidationError(f"The level is one of {', '.join(Announcement.Level.values)}.")
    now = timezone.now()
    start = starts_at or now
    if ends_at is not None and (ends_at <= start or ends_at <= now):
        raise ValidationError({"ends_at": "The end must come after the start, and not be past."})
    item = Announcement.objects.create(
        text=clean, level=level, starts_at=start, ends_at=ends_at, created_by=admin
    )
    record(admin, "announcement-posted", f"announcement:{item.pk}", detail={"level": level})
    return item


def withdraw(admin: AbstractBaseUser, item: Announcement) -> bool:
    """Withdraw ``item`` at once (platform admins): True if it was not withdrawn yet."""
    access.require_platform_admin(admin)
    done = Announcement.objects.filter(pk=item.pk, withdrawn_at__isnull=True).update(
        withdrawn_at=timezone.now()
    )
    if done:
        record(admin, "announcement-withdrawn", f"announcement:{item.pk}")
        item.refresh_from_db()
    return bool(done)


def banners(request: HttpRequest) -> list[Announcement]:
    """What this page shows: the newest running announcements the user has not hidden."""
    if not request.user.is_authenticated:
        return []
    hidden = request.session.get(HIDDEN_KEY, [])
    return list(running().exclude(pk__in=hidden)[:SHOWN])


class AnnouncementForm(forms.Form):
    text = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 2}), max_length=ANNOUNCEMENT_TEXT_MAX
    )
    level = forms.ChoiceField(choices=Announcement.Level.choices)
    starts_at = forms.DateTimeField(
        required=False,
        label="Starts (UTC)",
        help_text="Empty: now.",
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}),
    )
    ends_at = forms.DateTimeField(
        required=False,
        label="Ends (UTC)",
        help_text="Empty: until withdrawn.",
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}),
    )


ANNOUNCEMENTS = ListSpec(
    sorts={"starts": ["starts_at"], "created": ["created_at"]},
    default_sort="-starts",
    search=("text",),
    filters=(
        Filter("level", "Level", lookup="level", choices=tuple(Announcement.Level.choices)),
        Filter("state", "State", states={name: partial(in_state, name) for name in STATES}),
    ),
    per_page=50,
    search_label="Search text",
)


@login_required
def announcement_list(request: HttpRequest) -> HttpResponse:
    """Every announcement with its state; platform admins post (POST) and withdraw here."""
    is_admin = access.is_platform_admin(request.user)
    form = AnnouncementForm(request.POST or None)
    if request.method == "POST":
        access.require_platform_admin(request.user)
        if form.is_valid():
            data = form.cleaned_data
            try:
                item = post(
                    request.user, data["text"], data["level"], data["starts_at"], data["ends_at"]
                )
            except ValidationError as exc:
                form.add_error(None, exc)
            else:
                messages.success(request, f"Announcement #{item.pk} posted.")
                return redirect("console:announcements")
    listing = paginate(request, Announcement.objects.select_related("created_by"), ANNOUNCEMENTS)
    now = timezone.now()
    rows = [(item, state(item, now)) for item in listing.rows]
    return render(
        request,
        "console/announcements.html",
        {"form": form, "listing": listing, "rows": rows, "is_admin": is_admin},
        status=400 if request.method == "POST" else 200,
    )


@login_required
@require_POST
def announcement_withdraw(request: HttpRequest, pk: int) -> HttpResponse:
    access.require_platform_admin(request.user)
    item = get_object_or_404(Announcement, pk=pk)
    if withdraw(request.user, item):
        messages.success(request, f"Announcement #{item.pk} withdrawn.")
    return redirect("console:announcements")


@login_required
@require_POST
def announcement_hide(request: HttpRequest, pk: int) -> HttpResponse:
    """Hide a banner for the rest of this session; back to the page it was on."""
    item = get_object_or_404(Announcement, pk=pk)
    hidden = [i for i in request.session.get(HIDDEN_KEY, []) if i != item.pk]
    request.session[HIDDEN_KEY] = [*hidden, item.pk][-HIDDEN_MAX:]
    return redirect(console_path(request.POST.get("next", "")) or "console:dashboard")
