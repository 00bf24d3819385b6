"""Accounts (console-features "Accounts"): the platform admins' user list, where they add
users and reset passwords; self-registration (``SELF_REGISTRATION``, on by default); and
every user's own password change.

A password an admin sets is a random one shown once, on the page that made it, for the
admin to hand over: it is never stored readable, logged or put in the audit trail (which
records that it was reset, by whom). A new account belongs to no team until a team's admin
adds it (:mod:`mqcloud.console.teams`). Registration is limited per client address
(``SIGNUP_LIMIT_PER_HOUR``), counted from the audit trail so that every web process
shares the count.
"""

from __future__ import annotations

import secrets
from datetime import timedelta

from axes.helpers import get_client_ip_address
from django import forms
from django.conf import settings
from django.contrib import messages
from django.contrib.auth import get_user_model, login
from django.contrib.auth.decorators import login_required
from django.contrib.auth.forms import UserCreationForm
from django.db.models import Q
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from mqcloud.approvals.models import AuditEvent
from mqcloud.approvals.services import record
from mqcloud.console import access
from mqcloud.console.listing import Filter, ListSpec, paginate

PASSWORD_BYTES = 12
"""A generated password: 16 URL-safe characters."""

USERS = ListSpec(
    sorts={
        "username": ["username"],
        "joined": ["date_joined"],
        "login": ["last_login"],
    },
    default_sort="username",
    search=("username", "email"),
    filters=(
        Filter(
            "state",
            "State",
            states={
                "active": Q(is_active=True),
                "inactive": Q(is_active=False),
                "admin": Q(is_staff=True) | Q(is_superuser=True),
            },
        ),
    ),
    search_label="Search username or email",
)


class NewUserForm(forms.Form):
    username = forms.CharField(max_length=150)
    email = forms.EmailField(required=False)

    def clean_username(self) -> str:
        name = self.cleaned_data["username"].strip()
        field = get_user_model()._meta.get_field("username")
        for validate in field.validators:
            validate(name)
        if get_user_model().objects.filter(username=name).exists():
            raise forms.ValidationError(f"{name} exists already.")
        return name


class SignupForm(UserCreationForm):
    email = forms.EmailField(required=False)

    class Meta(UserCreationForm.Meta):
        fields = ("username", "email")


def _password() -> str:
    return secrets.token_urlsafe(PASSWORD_BYTES)


@login_required
def user_list(request: HttpRequest) -> HttpResponse:
    """Every account (platform admins): searched, filtered, sorted and paged."""
    access.require_platform_admin(request.user)
    return _page(request)


def _page(request: HttpRequest, shown: dict[str, str] | None = None) -> HttpResponse:
    """The list; with ``shown`` (a password just set) answered to the POST that set it, so
    it is on no other page and in no session."""
    users = get_user_model().objects.prefetch_related("memberships__team")
    listing = paginate(request, users, USERS)
    response = render(
        request, "console/users.html", {"listing": listing, "form": NewUserForm(), "shown": shown}
    )
    if shown is not None:
        response["Cache-Control"] = "no-store"
    return response


@login_required
@require_POST
def user_add(request: HttpRequest) -> HttpResponse:
    """Make an account with a generated password, shown once in the answer."""
    access.require_platform_admin(request.user)
    form = NewUserForm(request.POST)
    if not form.is_valid():
        messages.error(request, "; ".join(e for errs in form.errors.values() for e in errs))
        return redirect("console:users")
    password = _password()
    user = get_user_model().objects.create_user(
        form.cleaned_data["username"], form.cleaned_data["email"], password
    )
    record(request.user, "user-added", f"user:{user.username}", detail={"user": user.username})
    return _page(request, {"username": user.username, "password": password})


@login_required
@require_POST
def user_change(request: HttpRequest, pk: int) -> HttpResponse:
    """Reset a user's password (a generated one, shown once), or switch it off or on.
    Admins cannot switch themselves off (the platform must keep one who can log in)."""
    access.require_platform_admin(request.user)
    user = get_object_or_404(get_user_model(), pk=pk)
    action = request.POST.get("action", "")
    if action == "reset-password":
        password = _password()
        user.set_password(password)
        user.save(update_fields=["password"])
        record(request.user, "password-reset", f"user:{user.username}")
        return _page(request, {"username": user.username, "password": password})
    if action in ("deactivate", "activate"):
        if user.pk == request.user.pk:
            messages.error(request, "You cannot switch off your own account.")
            return redirect("console:users")
        user.is_active = action == "activate"
        user.save(update_fields=["is_active"])
        record(request.user, f"user-{action}d", f"user:{user.username}")
        messages.success(request, f"{user.username} is {'on' if user.is_active else 'off'}.")
    else:
        messages.error(request, "Unknown action.")
    return redirect("console:users")


def signup(request: HttpRequest) -> HttpResponse:
    """Self-registration, while ``SELF_REGISTRATION`` is on: an account in no team."""
    if not settings.SELF_REGISTRATION:
        raise Http404("Registration is closed: ask a platform admin for an account.")
    if request.user.is_authenticated:
        return redirect("console:dashboard")
    form = SignupForm(request.POST or None)
    if request.method == "POST":
        address = get_client_ip_address(request) or ""
        if _signups_exhausted(address):
            form.add_error(
                None,
                "Too many accounts were registered from your address in the last hour: "
                "try again later, or ask a platform admin for an account.",
            )
            return render(request, "registration/signup.html", {"form": form}, status=429)
        if form.is_valid():
            user = form.save()
            record(user, "user-registered", f"user:{user.username}", detail={"address": address})
            login(request, user, backend="django.contrib.auth.backends.ModelBackend")
            messages.success(request, "Welcome. Ask a team's admin to add you to the team.")
            return redirect("console:teams")
    return render(request, "registration/signup.html", {"form": form})


def _signups_exhausted(address: str) -> bool:
    """Whether ``address`` registered ``SIGNUP_LIMIT_PER_HOUR`` accounts in the last hour
    (0: no limit)."""
    limit = settings.SIGNUP_LIMIT_PER_HOUR
    if limit <= 0:
        return False
    since = timezone.now() - timedelta(hours=1)
    recent = AuditEvent.objects.filter(
        action="user-registered", created_at__gte=since, detail__address=address
    )
    return recent.count() >= limit
