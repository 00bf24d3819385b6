"""The dashboard: the user's favorite topics with their produce rates, cluster health,
brokers up/down, the top topics by traffic and the consumers furthest behind, open alerts — each a fixed number of indexed queries, whatever
the fleet's size, with links to the full (paged) lists."""

from __future__ import annotations

from datetime import timedelta

from django.contrib.auth.decorators import login_required
from django.db.models import Max, Sum
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone

from brokers.models import Broker, Cluster
from mqcloud.alerts.models import AlertEvent
from mqcloud.approvals.models import Application, Status
from mqcloud.console import access, lag
from mqcloud.console.favorites import starred_topics
from pipeline.models import TrafficMinute

TOP_WINDOW_MIN = 10  # MQCloud ranks by 10-minute sums
TOP_N = 10
OPEN_ALERT_HOURS = 24
FAVORITES_SHOWN = 20


def top_topics(user: object, n: int = TOP_N, minutes: int = TOP_WINDOW_MIN) -> dict:
    """The ``n`` topics of ``user`` with the most messages in the rollup tables' last
    ``minutes`` rolled-up minutes: {"rows": [{code, messages, bytes}], "until": minute}."""
    rolled = TrafficMinute.objects.filter(dimension=TrafficMinute.Dimension.TOPIC)
    until = rolled.aggregate(last=Max("minute"))["last"]
    if until is None:
        return {"rows": [], "until": None}
    window = rolled.filter(minute__gt=until - timedelta(minutes=minutes), minute__lte=until)
    if not access.is_platform_admin(user):
        window = window.filter(name__in=access.topics_for(user).values("code"))
    rows = (
        window.values("name")
        .annotate(messages=Sum("messages"), bytes=Sum("bytes"))
        .filter(messages__gt=0)
        .order_by("-messages", "name")[:n]
    )
    return {
        "rows": [{"code": r["name"], "messages": r["messages"], "bytes": r["bytes"]} for r in rows],
        "until": until,
    }


@login_required
def dashboard(request: HttpRequest) -> HttpResponse:
    """Cluster health and the top of the caller's topics, consumers, alerts, applications."""
    user = request.user
    is_admin = access.is_platform_admin(user)
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
    consumers = access.consumers_for(user)
    alerts = AlertEvent.objects.filter(
        created_at__gte=timezone.now() - timedelta(hours=OPEN_ALERT_HOURS)
    ).select_related("team")
    applications = Application.objects.filter(status=Status.PENDING)
    if not is_admin:
        alerts = alerts.filter(team__in=access.user_teams(user))
        applications = applications.filter(team__in=access.user_teams(user))
    traffic = top_topics(user)
    starred = list(starred_topics(user)[: FAVORITES_SHOWN + 1])
    favorites, favorites_error = lag.with_rates(starred[:FAVORITES_SHOWN])
    return render(
        request,
        "console/dashboard.html",
        {
            "clusters": clusters,
            "brokers": brokers,
            "brokers_up": sum(1 for b in brokers if b.status == Broker.Status.UP),
            "topic_count": access.topics_for(user).count(),
            "app_count": access.apps_for(user).count(),
            "consumer_count": consumers.count(),
            "paused_count": consumers.filter(paused=True).count(),
            "is_admin": is_admin,
            "top_topics": traffic["rows"],
            "top_until": traffic["until"],
            "top_window": TOP_WINDOW_MIN,
            "top_lagging": lag.top_lagging(consumers, TOP_N),
            "top_n": TOP_N,
            "alert_count": alerts.count(),
            "alerts": alerts[:20],
            "alert_hours": OPEN_ALERT_HOURS,
            "pending": applications.count(),
            "favorites": favorites,
            "favorites_more": len(starred) > FAVORITES_SHOWN,
            "favorites_error": favorites_error,
            "rate_minutes": lag.RATE_MINUTES,
        },
    )
