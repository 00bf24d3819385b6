"""Consumer pages: the list, per-partition progress (live through an htmx partial), and the
retry and dead-letter lists with their actions."""

from __future__ import annotations

import time
from urllib.parse import urlencode

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.db.models import Q
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBadRequest, JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from brokers.engine import ACTIVE_CLIENT_MS
from brokers.models import ConsumerPolicy
from mqcloud.alerts.failures import threshold_of as failure_threshold_of
from mqcloud.alerts.models import AlertEvent
from mqcloud.approvals.models import Application, Kind
from mqcloud.approvals.services import record
from mqcloud.console import access, engine_calls, lag, listing, rollups, topics
from mqcloud.console.clients import live_consumers
from mqcloud.console.listing import Filter, ListSpec

PROGRESS_POLL_S = 2
RETRY_PAGE = 50
LIST_PAGE = 50
RECENT_ALERTS = 10
"""Alerts of a consumer shown on its page (the rest on the alerts page)."""
ACTIONS = {
    "retry-resend": "resent now",
    "retry-skip": "skipped",
    "dlq-skip": "skipped",
    "dlq-purge": "purged",
}


CONSUMERS = ListSpec(
    sorts={
        "name": ["name"],
        "topic": ["topic__code"],
        "app": ["app__code"],
        "team": ["app__team__name"],
        "created": ["created_at"],
        "lag": [],  # measured, not a column: see consumer_list
    },
    default_sort="name",
    search=("name", "topic__code", "app__code"),
    filters=(
        Filter("team", "Team", lookup="app__team__name"),
        Filter("app", "App", lookup="app__code"),
        Filter("topic", "Topic", lookup="topic__code"),
        Filter("state", "State", states={"running": Q(paused=False), "paused": Q(paused=True)}),
        Filter("mode", "Mode", lookup="mode", choices=tuple(ConsumerPolicy.Mode.choices)),
    ),
    per_page=LIST_PAGE,
    search_label="Search name, topic or app",
)


@login_required
def consumer_list(request: HttpRequest) -> HttpResponse:
    """The user's consumers with lag, oldest unacked age and state: searched, filtered,
    sorted and paged on the server, the lag measured for the page's consumers only (one
    batched engine call), and refreshed by htmx every PROGRESS_POLL_S."""
    choices = {"team": topics.team_choices(request.user)}
    query = listing.parse(request.GET, CONSUMERS, choices)
    consumers = listing.narrow(access.consumers_for(request.user), CONSUMERS, query)
    recorded = False
    if query.sort_key == "lag":
        page = Paginator(range(consumers.count()), LIST_PAGE).get_page(query.page)
        found = lag.consumer_page(
            consumers,
            sort=query.sort,
            offset=page.start_index() - 1 if page.paginator.count else 0,
            limit=LIST_PAGE,
        )
        rows, error, recorded = found.rows, found.error, found.recorded
    else:
        ordered = consumers.select_related("topic", "app", "app__team").order_by(
            *listing.order(CONSUMERS, query)
        )
        page = Paginator(ordered, LIST_PAGE).get_page(query.page)
        rows, error = lag.measure(list(page.object_list))
    state = listing.Listing(CONSUMERS, query, page, request.GET, request.path, choices)
    template = "console/partials/consumer_rows.html" if request.htmx else "console/consumers.html"
    return render(
        request,
        template,
        {
            "rows": rows,
            "error": error,
            "listing": state,
            "recorded": recorded,
            "poll_s": PROGRESS_POLL_S,
            "updated": engine_calls.fmt_ms(int(time.time() * 1000)),
        },
    )


def _check_which(which: str) -> None:
    if which not in ("retry", "dlq"):
        raise Http404("No such list.")


def _owns(user, consumer: ConsumerPolicy) -> bool:
    return access.user_teams(user).filter(pk=consumer.app.team_id).exists()


def _progress_context(consumer: ConsumerPolicy, client_id: str | None) -> dict:
    """The progress card: one progress's partitions — the group's, or ``client_id``'s —
    or, for a broadcast or fan-out consumer without ``client_id``, each client's lag
    (its total lag is its slowest client's, as in every list)."""
    now = int(time.time() * 1000)
    rows: list = []
    clients: list[dict] = []
    error = ""
    try:
        if consumer.per_client and client_id is None:
            lags = engine_calls.client_lags(consumer.topic.code, consumer.app.code)
            clients = [
                {
                    "client_id": c,
                    "lag": g.lag,
                    "lagging_partitions": g.lagging_partitions,
                    "oldest_age_ms": g.oldest_age_ms(now),
                }
                for c, g in lags
                if c is not None
            ]
        if not clients:  # a clustering consumer, a client, or none consumed yet
            rows = engine_calls.progress(consumer.topic.code, consumer.app.code, client_id)
    except engine_calls.EngineUnavailable as exc:
        rows, clients, error = [], [], str(exc)
    partitions = [
        {
            "p": r,
            "locked": r.lock_expires_ms > now and bool(r.lock_owner),
            "lock_expires": engine_calls.fmt_ms(r.lock_expires_ms),
            "last_access": engine_calls.fmt_ms(r.last_access_ms),
        }
        for r in rows
    ]
    total = max((c["lag"] for c in clients), default=0) if clients else None
    return {
        "consumer": consumer,
        "client_id": client_id or "",
        "partitions": partitions,
        "client_lags": clients,
        "total_lag": sum(max(r.lag, 0) for r in rows) if total is None else total,
        "progress_error": error,
        "updated": engine_calls.fmt_ms(now),
        "poll_s": PROGRESS_POLL_S,
        "active_minutes": ACTIVE_CLIENT_MS // 60_000,
    }


def _client_id(request: HttpRequest, consumer: ConsumerPolicy) -> str | None:
    if not consumer.per_client:
        return None
    value = request.GET.get("client", "")[:128]
    return value or None


@login_required
def consumer_detail(request: HttpRequest, name: str) -> HttpResponse:
    consumer = access.get_consumer(request.user, name)
    client_id = _client_id(request, consumer)
    context = _progress_context(consumer, client_id)
    clients: list[str] = []
    if consumer.per_client:
        topic, app = consumer.topic.code, consumer.app.code
        try:
            if consumer.fan_out_members:
                clients = engine_calls.members(topic, app)
            else:
                clients = engine_calls.broadcast_clients(topic, app)
        except engine_calls.EngineUnavailable:
            clients = []
    try:
        retries, dead = engine_calls.retry_counts(consumer.topic.code, consumer.app.code, client_id)
        failures, held_back = engine_calls.consume_failures(consumer.topic.code, consumer.app.code)
    except engine_calls.EngineUnavailable:
        retries = dead = failures = held_back = None
    live, live_error = live_consumers(consumer.topic.code, consumer.app.code)
    open_apps = Application.objects.filter(
        target=f"consumer:{consumer.name}", status__in=["pending", "executing"]
    )
    recent_alerts = AlertEvent.objects.filter(target=f"consumer:{consumer.name}").order_by(
        "-created_at", "-id"
    )[:RECENT_ALERTS]
    context.update(
        {
            "clients": clients,
            "live_clients": live,
            "live_clients_error": live_error,
            "retries": retries,
            "dead": dead,
            "owns": _owns(request.user, consumer),
            "can_admin": access.admin_teams(request.user).filter(pk=consumer.app.team_id).exists(),
            "open_applications": open_apps,
            "kinds": Kind,
            "ranges": list(topics.RANGES),
            "failure_threshold": failure_threshold_of(consumer),
            "failures": failures,
            "held_back": held_back,
            "recent_alerts": recent_alerts,
        }
    )
    return render(request, "console/consumer_detail.html", context)


@login_required
def consumer_progress(request: HttpRequest, name: str) -> HttpResponse:
    """The progress table alone, for htmx polling."""
    consumer = access.get_consumer(request.user, name)
    context = _progress_context(consumer, _client_id(request, consumer))
    return render(request, "console/partials/consumer_progress.html", context)


@login_required
def retry_list(request: HttpRequest, name: str, which: str) -> HttpResponse:
    """The retry ('retry') or dead-letter ('dlq') list of a consumer."""
    _check_which(which)
    consumer = access.get_consumer(request.user, name)
    client_id = _client_id(request, consumer)
    try:
        page = max(0, int(request.GET.get("page", "0")))
    except ValueError:
        page = 0
    try:
        rows, retries, dead = engine_calls.retry_lists(
            consumer.topic.code,
            consumer.app.code,
            which,
            page * RETRY_PAGE,
            RETRY_PAGE,
            client_id,
        )
        error = ""
    except engine_calls.EngineUnavailable as exc:
        rows, retries, dead, error = [], 0, 0, str(exc)
    template = "console/partials/retry_rows.html" if request.htmx else "console/retries.html"
    return render(
        request,
        template,
        {
            "consumer": consumer,
            "which": which,
            "client_id": client_id,
            "rows": rows,
            "retries": retries,
            "dead": dead,
            "error": error,
            "page": page,
            "next_page": page + 1 if len(rows) == RETRY_PAGE else None,
            "owns": _owns(request.user, consumer),
            "can_admin": access.admin_teams(request.user).filter(pk=consumer.app.team_id).exists(),
        },
    )


@login_required
@require_POST
def retry_action(request: HttpRequest, name: str, which: str) -> HttpResponse:
    """Resend/skip retries, skip/purge dead letters (team admins; audited). Resending dead
    letters is an application (see the approvals kinds), filed from the same form."""
    _check_which(which)
    consumer = access.get_consumer(request.user, name)
    if not _owns(request.user, consumer):
        raise PermissionDenied("Only the consumer's team acts on its messages.")
    action = request.POST.get("action", "")
    client_id = _client_id(request, consumer)
    back = reverse("console:retries", args=[consumer.name, which])
    if client_id:
        back += "?" + urlencode({"client": client_id})
    ids_raw = request.POST.getlist("ids")
    if any(not (i.isascii() and i.isdigit()) for i in ids_raw):
        messages.error(request, "Message ids are whole numbers.")
        return redirect(back)
    ids = [int(i) for i in ids_raw]
    if which == "dlq" and action == "dlq-resend":
        query = f"?kind={Kind.DLQ_RESEND}&consumer={consumer.name}&ids={','.join(map(str, ids))}"
        return redirect(reverse("console:application-new") + query)
    if action not in ACTIONS or not action.startswith(which):
        messages.error(request, "Unknown action.")
        return redirect(back)
    access.require_team_admin(request.user, consumer.app.team)
    if action != "dlq-purge" and not ids:
        messages.error(request, "Select at least one message.")
        return redirect(back)
    try:
        done = engine_calls.retry_action(
            consumer.topic.code, consumer.app.code, action, ids, client_id
        )
    except engine_calls.EngineUnavailable as exc:
        messages.error(request, str(exc))
        return redirect(back)
    record(
        request.user,
        action,
        f"consumer:{consumer.name}",
        team=consumer.app.team,
        detail={"ids": ids, "count": done, **({"client_id": client_id} if client_id else {})},
    )
    messages.success(request, f"{done} message(s) {ACTIONS[action]}.")
    return redirect(back)


@login_required
def consumer_lag(request: HttpRequest, name: str) -> HttpResponse:
    """The consumer's lag history (sampled each minute by the pipeline rollup), as JSON."""
    consumer = access.get_consumer(request.user, name)
    try:
        start, end = topics.window(request)
    except ValueError as exc:
        return HttpResponseBadRequest(str(exc))
    data = rollups.lag(consumer.topic.code, consumer.app.code, start, end)
    data["rollup_every_minutes"] = settings.PIPELINE_ROLLUP_EVERY_MINUTES
    return JsonResponse({"consumer": consumer.name, "start_ms": start, "end_ms": end, **data})
