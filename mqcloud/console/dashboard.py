"""The dashboard: cluster health, brokers up/down, top topics by traffic, open alerts."""

from __future__ import annotations

import time
from datetime import timedelta

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone

from brokers.engine import Engine
from brokers.models import App, Broker, Cluster
from mqcloud.alerts.models import AlertEvent
from mqcloud.approvals.models import Application, Status
from mqcloud.console import access, engine_calls

TOP_WINDOW_MIN = 60
TOP_TOPICS = 10
TOP_SCAN = 200  # topics whose counters are read for the ranking at most
OPEN_ALERT_HOURS = 24


def top_topics(codes: list[str], minutes: int = TOP_WINDOW_MIN) -> list[dict]:
    """Topics ranked by messages produced + consumed in the last ``minutes``."""
    end = int(time.time() * 1000)
    start = end - minutes * 60_000

    async def call(engine: Engine) -> list[dict]:
        rows = []
        for code in codes[:TOP_SCAN]:
            minutes_ = await engine.traffic("topic", code, start, end)
            produced = sum(m.produced for m in minutes_)
            consumed = sum(m.consumed for m in minutes_)
            if produced or consumed:
                rows.append({"code": code, "produced": produced, "consumed": consumed})
        rows.sort(key=lambda r: (-(r["produced"] + r["consumed"]), r["code"]))
        return rows[:TOP_TOPICS]

    return engine_calls.run(call)


@login_required
def dashboard(request: HttpRequest) -> HttpResponse:
    """Cluster health and the caller's topics, apps, alerts and applications."""
    user = request.user
    is_admin = access.is_platform_admin(user)
    topics = access.topics_for(user).prefetch_related("groups")
    apps = App.objects.select_related("team")
    if not is_admin:
        apps = apps.filter(team__in=access.user_teams(user))
    brokers = list(Broker.objects.select_related("cluster"))
    clusters = []
    for cluster in Cluster.objects.all():
        members = [b for b in brokers if b.cluster_id == cluster.id]
        up = sum(1 for b in members if b.status == Broker.Status.UP)
        clusters.append(
            {
                "cluster": cluster,
                "brokers": len(members),
                "up": up,
                "healthy": bool(members) and up == len(members),
            }
        )
    try:
        ranking, traffic_error = top_topics([t.code for t in topics]), ""
    except engine_calls.EngineUnavailable as exc:
        ranking, traffic_error = [], str(exc)
    alerts = AlertEvent.objects.filter(
        created_at__gte=timezone.now() - timedelta(hours=OPEN_ALERT_HOURS)
    ).select_related("team")
    applications = Application.objects.filter(status=Status.PENDING)
    if not is_admin:
        alerts = alerts.filter(team__in=access.user_teams(user))
        applications = applications.filter(team__in=access.user_teams(user))
    return render(
        request,
        "console/dashboard.html",
        {
            "clusters": clusters,
            "brokers": brokers,
            "brokers_up": sum(1 for b in brokers if b.status == Broker.Status.UP),
            "topics": topics,
            "apps": apps,
            "teams": access.user_teams(user),
            "is_admin": is_admin,
            "top_topics": ranking,
            "top_window": TOP_WINDOW_MIN,
            "traffic_error": traffic_error,
            "alerts": alerts[:20],
            "alert_hours": OPEN_ALERT_HOURS,
            "pending": applications.count(),
        },
    )
