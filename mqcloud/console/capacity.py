"""The daily capacity report (console-features "Views and reports: … daily capacity
report"): what the platform stores and how fast it grows, for the platform admins to
plan memory before the store fills.

Each UTC day gets one :class:`~mqcloud.console.models.CapacityReport`: the store's memory
per master node (``INFO memory``), per cluster its topics, partitions and messages stored
now (from the partitions' bounds: a few pipelined round trips for thousands of topics)
and the day's produced messages and bytes (the engine's day totals per topic, counted
whatever the protocol and whether or not the pipeline runs; the pipeline's per-minute
topic rollups for a day the engine has no totals of), and the ten topics storing the
most. An hourly beat task makes the previous day's report once it is missing; a platform
admin may make the current day's (marked partial) at any time.
``/capacity/`` shows the latest report, the store's growth per day over the last week and
how many days remain until a node with a memory limit is full, and the last 30 days.
Each day's report is e-mailed to the platform admins (:mod:`.capacity_mail`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.db.models import Sum
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from brokers.models import Cluster, Topic
from mqcloud.approvals.services import record
from mqcloud.console import access, engine_calls
from mqcloud.console.models import CapacityReport
from pipeline.models import TrafficMinute

TOP_TOPICS = 10
HISTORY_DAYS = 30
GROWTH_DAYS = 7


def build(day: date, *, partial: bool = False) -> CapacityReport:
    """Measure the platform now and record it as ``day``'s report (replacing one made
    before). Raises what the engine raises when the store cannot be reached."""
    topics = list(Topic.objects.values_list("code", "partitions", "cluster__name"))

    async def measure(engine):
        return (
            await engine.store_nodes(),
            await engine.stored_messages([(code, partitions) for code, partitions, _ in topics]),
            await engine.day_traffic("topic", [code for code, _, _ in topics], f"{day:%Y%m%d}"),
        )

    nodes, stored, traffic = engine_calls.run(measure)
    produced = {code: (t.produced, t.produced_bytes) for code, t in traffic.items()}
    if not produced:  # a day before the engine kept day totals, or one they expired from
        produced = rolled_up_traffic(day)
    fields = ("topics", "partitions", "stored_messages", "produced_messages", "produced_bytes")
    per_cluster: dict[str, dict[str, int]] = {  # every cluster, even an empty one
        name: dict.fromkeys(fields, 0) for name in Cluster.objects.values_list("name", flat=True)
    }
    for code, partitions, cluster in topics:
        row = per_cluster[cluster]
        row["topics"] += 1
        row["partitions"] += partitions
        row["stored_messages"] += stored.get(code, 0)
        made, size = produced.get(code, (0, 0))
        row["produced_messages"] += made
        row["produced_bytes"] += size
    cluster_of = {code: cluster for code, _, cluster in topics}
    top = sorted(((n, code) for code, n in stored.items() if n > 0), reverse=True)[:TOP_TOPICS]
    report, _ = CapacityReport.objects.update_or_create(
        day=day,
        defaults={
            "partial": partial,
            "store": [
                {
                    "name": n.name,
                    "used_bytes": n.used_bytes,
                    "max_bytes": n.max_bytes,
                    "keys": n.keys,
                }
                for n in nodes
            ],
            "clusters": [{"cluster": name, **row} for name, row in sorted(per_cluster.items())],
            "top_topics": [
                {"code": code, "cluster": cluster_of[code], "stored": n} for n, code in top
            ],
        },
    )
    return report


def rolled_up_traffic(day: date) -> dict[str, tuple[int, int]]:
    """Topic → (messages, bytes) produced on ``day`` by the pipeline's per-minute rollups."""
    start = datetime(day.year, day.month, day.day, tzinfo=UTC)
    return {
        row["name"]: (row["messages"] or 0, row["bytes"] or 0)
        for row in TrafficMinute.objects.filter(
            dimension=TrafficMinute.Dimension.TOPIC,
            minute__gte=start,
            minute__lt=start + timedelta(days=1),
        )
        .values("name")
        .annotate(messages=Sum("messages"), bytes=Sum("bytes"))
    }


def make_missing_report(today: date | None = None) -> bool:
    """The hourly beat task's work: make yesterday's report unless it exists (a partial
    one made during that day is replaced); True if it made one."""
    yesterday = (today or timezone.now().date()) - timedelta(days=1)
    if CapacityReport.objects.filter(day=yesterday, partial=False).exists():
        return False
    build(yesterday)
    return True


@dataclass(frozen=True)
class NodeOutlook:
    """A store node in the latest report, with its growth and the days until it is full."""

    name: str
    used_bytes: int
    max_bytes: int
    keys: int
    used_percent: float | None
    growth_per_day: int | None
    days_left: float | None


def outlook(reports: list[CapacityReport]) -> list[NodeOutlook]:
    """Each node of the newest of ``reports`` (newest first) with its memory growth per
    day against the oldest report of the last :data:`GROWTH_DAYS` days that knew it, and
    the days left until its limit at that pace (None: no limit, no growth, or no history)."""
    if not reports:
        return []
    latest = reports[0]
    window = [r for r in reports if (latest.day - r.day).days <= GROWTH_DAYS]
    out = []
    for node in latest.store:
        growth = None
        for older in reversed(window):  # the oldest first
            days = (latest.day - older.day).days
            before = next((n for n in older.store if n["name"] == node["name"]), None)
            if days > 0 and before is not None:
                growth = round((node["used_bytes"] - before["used_bytes"]) / days)
                break
        limit = node["max_bytes"]
        left = None
        if limit and growth and growth > 0:
            left = round(max(0, limit - node["used_bytes"]) / growth, 1)
        out.append(
            NodeOutlook(
                node["name"],
                node["used_bytes"],
                limit,
                node["keys"],
                round(100 * node["used_bytes"] / limit, 1) if limit else None,
                growth,
                left,
            )
        )
    return out


@login_required
def capacity(request: HttpRequest) -> HttpResponse:
    """Platform admins: the latest report, the store's outlook, the last 30 days."""
    access.require_platform_admin(request.user)
    reports = list(CapacityReport.objects.all()[:HISTORY_DAYS])
    history = [
        {
            "report": r,
            "stored": sum(c["stored_messages"] for c in r.clusters),
            "produced": sum(c["produced_messages"] for c in r.clusters),
            "produced_bytes": sum(c["produced_bytes"] for c in r.clusters),
            "used_bytes": sum(n["used_bytes"] for n in r.store),
        }
        for r in reports
    ]
    return render(
        request,
        "console/capacity.html",
        {
            "latest": reports[0] if reports else None,
            "nodes": outlook(reports),
            "history": history,
            "growth_days": GROWTH_DAYS,
        },
    )


@login_required
@require_POST
def capacity_now(request: HttpRequest) -> HttpResponse:
    """Platform admins: make today's report now (partial; audited)."""
    access.require_platform_admin(request.user)
    today = timezone.now().date()
    try:
        build(today, partial=True)
    except engine_calls.EngineUnavailable as exc:  # say so; the old reports stay
        messages.error(request, f"The store could not be measured: {exc}")
    else:
        record(request.user, "capacity-report-made", f"capacity:{today.isoformat()}")
        messages.success(request, f"Today's report ({today.isoformat()}, so far) is made.")
    return redirect("console:capacity")
