"""App pages: the list, an app's producers, consumers and tokens, creation and token
rotation (team admins). A token is shown once, in the response that issued it. A team's
anonymous app (what token-less clients act as) is listed and labelled, and has no tokens."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST

from brokers import anonymous
from brokers.engine import LATENCY_BOUNDS_MS, ClientLatency
from brokers.models import App, ConsumerPolicy, ProducerPolicy
from brokers.validators import APP_CODE_MAX, name_validator
from mqcloud.alerts.refusals import describe
from mqcloud.approvals.services import record
from mqcloud.console import access, engine_calls
from mqcloud.console.clients import app_client_rows
from mqcloud.console.listing import Filter, ListSpec, paginate
from mqcloud.console.topics import team_choices

APPS = ListSpec(
    sorts={"code": ["code"], "team": ["team__name"], "created": ["created_at"]},
    default_sort="code",
    search=("code", "description"),
    filters=(
        Filter("team", "Team", lookup="team__name"),
        Filter(
            "kind",
            "Kind",
            states={"anonymous": Q(is_anonymous=True), "admin": Q(is_admin=True)},
        ),
    ),
    search_label="Search code or description",
)
POLICY_SORTS = {"name": ["name"], "topic": ["topic__code"], "created": ["created_at"]}
APP_PRODUCERS = ListSpec(
    sorts=POLICY_SORTS,
    default_sort="name",
    search=("name", "topic__code"),
    prefix="p_",
    per_page=25,
    search_label="Search producers by name or topic",
)
APP_CONSUMERS = ListSpec(
    sorts=POLICY_SORTS,
    default_sort="name",
    search=("name", "topic__code"),
    filters=(
        Filter("state", "State", states={"running": Q(paused=False), "paused": Q(paused=True)}),
    ),
    prefix="c_",
    per_page=25,
    search_label="Search consumers by name or topic",
)
APP_TOKENS = ListSpec(
    sorts={"created": ["created_at"]}, default_sort="-created", prefix="t_", per_page=10
)


class AppForm(forms.Form):
    code = forms.CharField(max_length=APP_CODE_MAX, validators=[name_validator])
    team = forms.ChoiceField()
    description = forms.CharField(max_length=500, required=False)

    def __init__(self, *args: object, user: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        self.fields["team"].choices = [(t.name, t.name) for t in access.admin_teams(user)]

    def clean_code(self) -> str:
        code = self.cleaned_data["code"]
        if anonymous.is_reserved(code):
            raise forms.ValidationError(
                f"'{anonymous.PREFIX}' and '{anonymous.PREFIX}.…' are reserved for the teams'"
                " anonymous apps."
            )
        if App.objects.filter(code=code).exists():
            raise forms.ValidationError("An app with this code exists.")
        return code


@login_required
def app_list(request: HttpRequest) -> HttpResponse:
    """The user's apps, searched, filtered, sorted and paged on the server (the tokens of
    the page's apps only)."""
    apps = access.apps_for(request.user).prefetch_related("tokens")
    listing = paginate(request, apps, APPS, choices={"team": team_choices(request.user)})
    return render(
        request,
        "console/apps.html",
        {"listing": listing, "can_create": access.admin_teams(request.user).exists()},
    )


def _get_app(user, code: str) -> App:
    app = access.apps_for(user).filter(code=code).first()
    if app is None:
        raise Http404("No such app.")
    return app


def _detail(request: HttpRequest, app: App, token: str = "", status: int = 200) -> HttpResponse:
    try:
        found, refusals_error = engine_calls.refusals(app.code), ""
    except engine_calls.EngineUnavailable as exc:
        found, refusals_error = [], str(exc)
    refusals = [
        {"topic": r.topic, "refused": r.refused, "why": describe(r.by_reason)} for r in found
    ]
    client_rows, clients_error = app_client_rows(app.code)
    latency = _produce_latency(request, app)
    return render(
        request,
        "console/app_detail.html",
        {
            "app": app,
            "token": token,
            "tokens": paginate(request, app.tokens.all(), APP_TOKENS),
            "producers": paginate(
                request,
                ProducerPolicy.objects.filter(app=app).select_related("topic"),
                APP_PRODUCERS,
            ),
            "consumers": paginate(
                request,
                ConsumerPolicy.objects.filter(app=app).select_related("topic"),
                APP_CONSUMERS,
            ),
            "can_admin": access.admin_teams(request.user).filter(pk=app.team_id).exists(),
            "refusals": refusals,
            "refusals_error": refusals_error,
            "clients": client_rows,
            "clients_error": clients_error,
            **latency,
        },
        status=status,
    )


LATENCY_WINDOWS = {"1": "the last hour", "24": "the last day", "240": "the last 10 days"}
"""The windows (``?latency=<hours>``) the app page offers for its producer statistics."""


def _produce_latency(request: HttpRequest, app: App) -> dict[str, Any]:
    """The app page's producer statistics: per topic and client host, store-time
    percentiles and failed messages over the window asked for (the last hour unless
    ``?latency=`` names another of :data:`LATENCY_WINDOWS`)."""
    asked = request.GET.get("latency", "1")
    window_error = ""
    if asked not in LATENCY_WINDOWS:
        window_error = f"No such window; showing the last hour ({', '.join(LATENCY_WINDOWS)} h)."
        asked = "1"
    topics = list(ProducerPolicy.objects.filter(app=app).values_list("topic__code", flat=True))
    rows, error = [], ""
    try:
        found = engine_calls.produce_latency(app.code, topics, int(asked))
    except engine_calls.EngineUnavailable as exc:
        found, error = [], str(exc)
    for r in found:
        rows.append(
            {
                "topic": r.topic,
                "client": r.client,
                "messages": r.latency.messages,
                "failed": r.latency.failed,
                "p50": _bound(r.latency, 0.5),
                "p90": _bound(r.latency, 0.9),
                "p99": _bound(r.latency, 0.99),
            }
        )
    return {
        "latency_rows": rows,
        "latency_error": error,
        "latency_window": asked,
        "latency_label": LATENCY_WINDOWS[asked],
        "latency_windows": LATENCY_WINDOWS,
        "latency_window_error": window_error,
    }


def _bound(latency: ClientLatency, share: float) -> str:
    """A percentile as the page shows it: "≤ 5 ms", "> 5000 ms" or "—" (none stored)."""
    if not latency.messages:
        return "—"
    bound = latency.percentile(share)
    return f"> {LATENCY_BOUNDS_MS[-1]} ms" if bound is None else f"≤ {bound} ms"


@login_required
def app_detail(request: HttpRequest, code: str) -> HttpResponse:
    return _detail(request, _get_app(request.user, code))


@never_cache
@login_required
@require_POST
def app_rotate(request: HttpRequest, code: str) -> HttpResponse:
    """Issue a new token, revoke the old ones; the page shows the new token this once."""
    app = _get_app(request.user, code)
    access.require_team_admin(request.user, app.team)
    if app.is_anonymous:
        messages.error(request, f"{app.code} is an anonymous app: it has no tokens.")
        return _detail(request, app, status=400)
    with transaction.atomic():
        token = app.issue_token()
        record(request.user, "app-token-rotated", f"app:{app.code}", team=app.team)
    return _detail(request, app, token)


@never_cache
@login_required
def app_create(request: HttpRequest) -> HttpResponse:
    """Create an app for a team the user administers; its first token is shown once."""
    if not access.admin_teams(request.user).exists():
        access.require_platform_admin(request.user)
    form = AppForm(request.POST or None, user=request.user)
    if request.method == "POST" and form.is_valid():
        team = access.admin_teams(request.user).get(name=form.cleaned_data["team"])
        try:
            with transaction.atomic():
                app = App.objects.create(
                    code=form.cleaned_data["code"],
                    team=team,
                    description=form.cleaned_data["description"],
                )
                token = app.issue_token()
                record(request.user, "app-created", f"app:{app.code}", team=team)
        except IntegrityError:
            form.add_error("code", "An app with this code exists.")
        else:
            return _detail(request, app, token)
    return render(request, "console/app_form.html", {"form": form})
