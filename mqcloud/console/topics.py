"""Topic pages: the list (produce rates; marking topics open to token-less zbus clients), a topic's
detail with its zbus access state, its per-minute traffic as JSON for Chart.js."""

from __future__ import annotations

import time
from datetime import UTC, datetime

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.db.models import Q
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest, JsonResponse
from django.shortcuts import render

from brokers import anonymous
from brokers.anonymous import has_anonymous_policy, with_open_flag
from brokers.models import Cluster, ConsumerPolicy, ProducerPolicy, Topic
from mqcloud.alerts.models import TrafficRule
from mqcloud.console import access, engine_calls, lag, rollups
from mqcloud.console.clients import attach_live_producers
from mqcloud.console.favorites import with_starred
from mqcloud.console.listing import Filter, ListSpec, paginate
from mqcloud.console.models import FavoriteTopic
from mqcloud.zbus_access import CLOSED_LABEL, OPEN_LABEL

RANGES = {"1h": 60, "6h": 360, "24h": 1440}
COUNTER_RETENTION_MS = 30 * 86_400_000  # the engine keeps per-minute counters 30 days
LIST_PAGE = 50
TEAM = Filter("team", "Team", lookup="team__name")
TOPICS = ListSpec(
    sorts={
        "code": ["code"],
        "team": ["team__name"],
        "cluster": ["cluster__name"],
        "type": ["type"],
        "partitions": ["partitions"],
        "created": ["created_at"],
    },
    default_sort="code",
    search=("code", "description"),
    filters=(
        TEAM,
        Filter("cluster", "Cluster", lookup="cluster__name"),
        Filter("type", "Type", lookup="type", choices=tuple(Topic.Type.choices)),
        Filter("starred", "Favorites", states={"starred": Q(starred=True)}),
    ),
    per_page=LIST_PAGE,
    search_label="Search code or description",
)

TOPIC_POLICY_SORTS = {"name": ["name"], "app": ["app__code"], "created": ["created_at"]}
TOPIC_PRODUCERS = ListSpec(
    sorts=TOPIC_POLICY_SORTS,
    default_sort="name",
    search=("name", "app__code"),
    prefix="p_",
    per_page=25,
    search_label="Search producers by name or app",
)
TOPIC_CONSUMERS = ListSpec(
    sorts=TOPIC_POLICY_SORTS,
    default_sort="name",
    search=("name", "app__code"),
    filters=(
        Filter("state", "State", states={"running": Q(paused=False), "paused": Q(paused=True)}),
    ),
    prefix="c_",
    per_page=25,
    search_label="Search consumers by name or app",
)


def team_choices(user: object) -> list[tuple[str, str]]:
    """The teams a list may be filtered by: the user's (every team for admins)."""
    return [(n, n) for n in access.user_teams(user).order_by("name").values_list("name", flat=True)]


@login_required
def topic_list(request: HttpRequest) -> HttpResponse:
    """The user's topics, searched, filtered, sorted and paged on the server, each with
    its produce rate over the last minutes (one batched engine call for the page)."""
    topics = with_starred(
        with_open_flag(access.topics_for(request.user)), request.user
    ).prefetch_related("groups")
    clusters = [(n, n) for n in Cluster.objects.values_list("name", flat=True)]
    listing = paginate(
        request, topics, TOPICS, choices={"team": team_choices(request.user), "cluster": clusters}
    )
    rows, error = lag.with_rates(listing.rows)
    return render(
        request,
        "console/topics.html",
        {
            "rows": rows,
            "listing": listing,
            "rate_minutes": lag.RATE_MINUTES,
            "error": error,
        },
    )


@login_required
def topic_detail(request: HttpRequest, code: str) -> HttpResponse:
    topic = access.get_topic(request.user, code)
    groups = topic.groups.select_related("leader").order_by("group_id")
    leaders = {p: g for g in groups for p in g.partitions}
    try:
        bounds, engine_error = engine_calls.bounds(topic.code, topic.partitions), ""
    except engine_calls.EngineUnavailable as exc:
        bounds, engine_error = [], str(exc)
    producers = paginate(
        request,
        ProducerPolicy.objects.filter(topic=topic).select_related("app"),
        TOPIC_PRODUCERS,
    )
    clients_error = attach_live_producers(topic.code, producers.rows)  # verify producer
    partitions = [
        {
            "partition": p,
            "min": lo,
            "max": hi,
            "count": hi - lo,
            "group": leaders.get(p),
        }
        for p, lo, hi in bounds
    ]
    return render(
        request,
        "console/topic_detail.html",
        {
            "topic": topic,
            "groups": groups,
            "partitions": partitions,
            "engine_error": engine_error,
            "producers": producers,
            "clients_error": clients_error,
            "consumers": paginate(
                request,
                ConsumerPolicy.objects.filter(topic=topic).select_related("app"),
                TOPIC_CONSUMERS,
            ),
            "ranges": list(RANGES),
            "can_manage": access.user_teams(request.user).filter(pk=topic.team_id).exists(),
            "zbus": zbus_access(topic),
            "traffic_rules": list(TrafficRule.objects.filter(topic=topic)),
            "starred": FavoriteTopic.objects.filter(user_id=request.user.pk, topic=topic).exists(),
        },
    )


def zbus_access(topic: Topic) -> dict:
    """Whether token-less zbus clients may use ``topic``, in words, and which applications
    make sense: opening unless open, closing while an anonymous policy is left."""
    is_open = anonymous.is_open(topic)
    return {
        "open": is_open,
        "label": OPEN_LABEL if is_open else CLOSED_LABEL,
        "can_open": not is_open,
        "can_close": has_anonymous_policy(topic),
        "token_set": bool(topic.zbus_token_hash),
    }


def window(request: HttpRequest) -> tuple[int, int]:
    """[start, end) in ms: a UTC ``day`` (YYYY-MM-DD) or a ``range`` ending now."""
    now = int(time.time() * 1000)
    day = request.GET.get("day")
    if day:
        start_dt = datetime.strptime(day, "%Y-%m-%d").replace(tzinfo=UTC)
        start = int(start_dt.timestamp() * 1000)
        return start, min(start + 86_400_000, now + 60_000)
    minutes = RANGES.get(request.GET.get("range", "1h"))
    if minutes is None:
        raise ValueError(f"range is one of {', '.join(RANGES)}")
    end = (now // 60_000 + 1) * 60_000
    return end - minutes * 60_000, end


def series(dimension: str, name: str, start: int, end: int) -> dict:
    """Per-minute series as Chart.js data: a minute without a counter had no traffic (0);
    a minute older than the counters' retention, or not begun yet, has no sample (None)."""
    rows = {m.minute_ms: m for m in engine_calls.traffic(dimension, name, start, end)}
    now = int(time.time() * 1000)
    kept_from = now - COUNTER_RETENTION_MS
    labels, produced, consumed, pbytes, cbytes = [], [], [], [], []
    for minute in range(start - start % 60_000, end, 60_000):
        m = rows.get(minute)
        labels.append(datetime.fromtimestamp(minute / 1000, UTC).strftime("%H:%M"))
        known = m is not None or kept_from <= minute <= now
        produced.append(m.produced if m else (0 if known else None))
        consumed.append(m.consumed if m else (0 if known else None))
        pbytes.append(m.produced_bytes if m else (0 if known else None))
        cbytes.append(m.consumed_bytes if m else (0 if known else None))
    return {
        "labels": labels,
        "produced": produced,
        "consumed": consumed,
        "produced_bytes": pbytes,
        "consumed_bytes": cbytes,
        "total_produced": sum(v or 0 for v in produced),
        "total_consumed": sum(v or 0 for v in consumed),
    }


@login_required
def topic_traffic(request: HttpRequest, code: str) -> HttpResponse:
    """Per-minute produce/consume counts and bytes of a topic (UTC minutes), with the
    rollup's produce→store latency percentiles, as JSON."""
    topic = access.get_topic(request.user, code)
    try:
        start, end = window(request)
    except ValueError as exc:
        return HttpResponseBadRequest(str(exc))
    try:
        data = series("topic", topic.code, start, end)
    except engine_calls.EngineUnavailable as exc:
        return JsonResponse({"error": str(exc)}, status=503)
    data.update(rollups.latency(topic.code, start, end))
    data["rollup_every_minutes"] = settings.PIPELINE_ROLLUP_EVERY_MINUTES
    return JsonResponse({"topic": topic.code, "start_ms": start, "end_ms": end, **data})
