"""Console views: the dashboard of brokers, topics and apps the user may see."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from brokers.models import App, Broker, Topic
from mqcloud.api.scoping import is_platform_admin, user_teams


@login_required
def dashboard(request: HttpRequest) -> HttpResponse:
    """Cluster health and the caller's topics and apps."""
    teams = user_teams(request.user)
    topics = Topic.objects.select_related("cluster", "team").prefetch_related("groups")
    apps = App.objects.select_related("team")
    if not is_platform_admin(request.user):
        topics = topics.filter(team__in=teams)
        apps = apps.filter(team__in=teams)
    brokers = Broker.objects.select_related("cluster")
    return render(
        request,
        "console/dashboard.html",
        {
            "brokers": brokers,
            "brokers_up": sum(1 for b in brokers if b.status == Broker.Status.UP),
            "topics": topics,
            "apps": apps,
            "teams": teams,
            "is_admin": is_platform_admin(request.user),
        },
    )
