"""The API tokens page: create a personal token (shown once), list and revoke them.

Every user manages their own tokens; platform admins also see every user's and may revoke
any. Creation and revocation are audited (:mod:`mqcloud.api.tokens`).
"""

from __future__ import annotations

from datetime import timedelta

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from mqcloud.api import tokens
from mqcloud.api.models import ApiToken
from mqcloud.console import access
from mqcloud.console.listing import ListSpec, paginate

LIFETIMES = [
    ("", "Never expires"),
    ("7", "7 days"),
    ("30", "30 days"),
    ("90", "90 days"),
    ("365", "1 year"),
]

TOKEN_SORTS = {"created": ["created_at"], "name": ["name"], "used": ["last_used_at"]}
OWN = ListSpec(sorts=TOKEN_SORTS, default_sort="-created", search=("name",), prefix="o_",
               per_page=25, search_label="Search your tokens by name")  # fmt: skip
OTHERS = ListSpec(
    sorts={**TOKEN_SORTS, "user": ["user__username"]},
    default_sort="-created",
    search=("name", "user__username"),
    prefix="a_",
    per_page=25,
    search_label="Search by user or token name",
)


class TokenForm(forms.Form):
    name = forms.CharField(
        max_length=tokens.NAME_MAX, help_text="What the token is for, e.g. “nightly lag report”."
    )
    expires_in = forms.ChoiceField(choices=LIFETIMES, required=False, label="Expires")
    read_only = forms.BooleanField(
        required=False,
        label="Read-only (GET requests only)",
        help_text="A read-only token can look but never change anything.",
    )

    def clean_name(self) -> str:
        name = self.cleaned_data["name"].strip()
        if not name:
            raise forms.ValidationError("Name the token.")
        return name


def _context(request: HttpRequest, form: TokenForm, **extra: object) -> dict:
    own = paginate(request, ApiToken.objects.filter(user=request.user), OWN)
    others = None
    if access.is_platform_admin(request.user):
        rows = ApiToken.objects.exclude(user=request.user).select_related("user")
        others = paginate(request, rows, OTHERS)
    return {"form": form, "tokens": own, "others": others, **extra}


@login_required
def token_list(request: HttpRequest) -> HttpResponse:
    """GET: the tokens and the form. POST: create one and show it, once."""
    if request.method != "POST":
        return render(request, "console/tokens.html", _context(request, TokenForm()))
    form = TokenForm(request.POST)
    if not form.is_valid():
        return render(request, "console/tokens.html", _context(request, form), status=400)
    days = form.cleaned_data["expires_in"]
    expires_at = timezone.now() + timedelta(days=int(days)) if days else None
    token, secret = tokens.create_token(
        request.user,
        form.cleaned_data["name"],
        read_only=form.cleaned_data["read_only"],
        expires_at=expires_at,
    )
    response = render(
        request,
        "console/tokens.html",
        _context(request, TokenForm(), new_token=token, secret=secret),
        status=201,
    )
    response["Cache-Control"] = "no-store"  # the secret must not linger in a cache
    return response


@login_required
@require_POST
def token_revoke(request: HttpRequest, pk: int) -> HttpResponse:
    """Revoke one of the user's tokens (any token for a platform admin)."""
    token = get_object_or_404(tokens.tokens_visible_to(request.user), pk=pk)
    try:
        tokens.revoke_token(request.user, token)
    except PermissionError as exc:
        raise PermissionDenied(str(exc)) from None
    messages.success(request, f"Token “{token.name}” (…{token.hint}) revoked.")
    return redirect("console:tokens")
