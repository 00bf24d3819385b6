"""Clusters and brokers: status, heartbeat, partition groups led, weights, permissions;
platform admins can give every group back to its preferred leader now. And the HTTP-MQ
proxy processes running now, from their reports (:mod:`proxy.httpmq.report`)."""

from __future__ import annotations

from datetime import UTC, datetime
from functools import partial
from typing import Any

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.db.models import Count
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST
from redis.exceptions import RedisError

from brokers.engine import read_reports
from brokers.models import Broker, Cluster, PartitionGroup
from mqcloud.console import access
from mqcloud.console.listing import ListSpec, paginate
from mqcloud.engine_access import run_on_store
from mqcloud.tasks import elect_preferred_leaders
from proxy.httpmq.report import BOARD as PROXY_BOARD

GROUPS_LED = ListSpec(
    sorts={"topic": ["topic__code", "group_id"]},
    default_sort="topic",
    search=("topic__code",),
    search_label="Search topic",
)


def proxy_processes() -> list[dict[str, Any]] | None:
    """The HTTP-MQ serving processes whose reports are valid, by name (None: Redis does
    not answer)."""
    try:
        reports = run_on_store(partial(read_reports, board=PROXY_BOARD), timeout_s=2)
    except (RedisError, OSError):
        return None
    rows = []
    for name, doc in sorted(reports.items()):
        since = doc.get("since")
        rows.append(
            {
                "name": name,
                "host": doc.get("host", ""),
                "port": doc.get("port", ""),
                "process": doc.get("process", ""),
                "pid": doc.get("pid", ""),
                "since": datetime.fromtimestamp(since, UTC)
                if isinstance(since, int | float)
                else None,
                "catalog_version": doc.get("catalog_version", ""),
            }
        )
    return rows


@login_required
def cluster_list(request: HttpRequest) -> HttpResponse:
    """Every cluster with its brokers (the platform's layout is visible to all users)."""
    brokers = Broker.objects.select_related("cluster").annotate(groups_led=Count("led_groups"))
    clusters = [
        {"cluster": c, "brokers": [b for b in brokers if b.cluster_id == c.id]}
        for c in Cluster.objects.annotate(topic_count=Count("topics"))
    ]
    return render(
        request,
        "console/clusters.html",
        {
            "clusters": clusters,
            "preferred_healthy_seconds": int(settings.PREFERRED_LEADER_HEALTHY_SECONDS),
            "proxies": proxy_processes(),
        },
    )


@login_required
def broker_detail(request: HttpRequest, broker_id: int) -> HttpResponse:
    """One broker and the partition groups it leads (topics of other teams are counted,
    not named, unless the user is a platform admin)."""
    broker = get_object_or_404(Broker.objects.select_related("cluster"), pk=broker_id)
    led = PartitionGroup.objects.filter(leader=broker)
    visible = led.filter(topic__in=access.topics_for(request.user).values("pk"))
    listing = paginate(request, visible.select_related("topic"), GROUPS_LED)
    return render(
        request,
        "console/broker_detail.html",
        {
            "broker": broker,
            "listing": listing,
            "led": led.count(),
            "hidden": led.count() - visible.count(),
        },
    )


@login_required
@require_POST
def cluster_elect_preferred(request: HttpRequest, pk: int) -> HttpResponse:
    """Move every group of the cluster whose preferred leader is healthy back to it now
    (platform admins; audited)."""
    access.require_platform_admin(request.user)
    cluster = get_object_or_404(Cluster, pk=pk)
    moves = elect_preferred_leaders(cluster, request.user)
    if moves:
        moved = ", ".join(f"{m['topic']} group {m['group']} → broker {m['to']}" for m in moves)
        messages.success(request, f"Preferred leaders elected: {moved}.")
    else:
        messages.info(request, f"Every group of {cluster.name} is led by its preferred leader.")
    return redirect("console:clusters")
