"""``/healthz`` (PostgreSQL and Redis reachability) and ``/metrics`` (Prometheus format).

Both also show what each running broker process reports about itself
(:func:`brokers.engine.read_reports`): whether it serves, and if not why (a broker removed
from the catalog waits to be added back), and — in ``/metrics``, per process of a broker
run with ``--processes`` — its protocol error counts, read-ahead, notification
wake-ups and store write times of the last minute.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import redis
from django.conf import settings
from django.db import connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils import timezone
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Gauge, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from redis.exceptions import RedisError

from brokers.engine import read_reports
from brokers.models import App, Broker, ConsumerPolicy, ProducerPolicy, Topic
from mqcloud.engine_access import run_on_store


def _check_postgres() -> tuple[bool, str]:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
        return True, "ok"
    except Exception as exc:  # any failure means unhealthy; report its class only
        return False, type(exc).__name__


def _check_redis() -> tuple[bool, str]:
    client = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=2, socket_connect_timeout=2)
    try:
        client.ping()
        return True, "ok"
    except redis.RedisError as exc:
        return False, type(exc).__name__
    finally:
        client.close()


def _broker_reports() -> dict[tuple[str, str], dict[str, Any]]:
    """The broker processes' reports by (broker id, process number) ({} when Redis does
    not answer): ``broker:<id>`` is process 0, ``broker:<id>:<n>`` worker n."""

    try:
        reports = run_on_store(read_reports, timeout_s=2)
    except (RedisError, OSError):
        return {}
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for name, doc in reports.items():
        if name.startswith("broker:"):
            broker, _, process = name.removeprefix("broker:").partition(":")
            found[broker, process or "0"] = doc
    return found


@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    """200 when PostgreSQL and Redis answer, 503 otherwise; the body says which failed, and
    what each broker process reports (serving, or not and why)."""
    started = time.monotonic()
    pg_ok, pg = _check_postgres()
    redis_ok, red = _check_redis()
    ok = pg_ok and redis_ok
    reports = _broker_reports() if redis_ok else {}
    processes = Counter(bid for bid, _ in reports)
    return JsonResponse(
        {
            "status": "ok" if ok else "unavailable",
            "postgres": pg,
            "redis": red,
            "brokers": {
                bid: {
                    "state": doc.get("state"),
                    "reason": doc.get("reason", ""),
                    "processes": processes[bid],
                }
                for (bid, process), doc in sorted(reports.items())
                if process == "0"
            },
            "elapsed_ms": round((time.monotonic() - started) * 1000, 1),
        },
        status=200 if ok else 503,
    )


class _ReportCollector:
    """Prometheus families from the broker processes' reports."""

    def __init__(self, reports: dict[tuple[str, str], dict[str, Any]]) -> None:
        self.reports = reports

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        serving = GaugeMetricFamily(
            "mqcloud_broker_serving",
            "Whether a running broker process serves (0: e.g. removed from the catalog)",
            labels=["broker"],
        )
        errors = CounterMetricFamily(
            "mqcloud_broker_protocol_errors",
            "Protocol errors of clients, per broker process since it started",
            labels=["broker", "process", "protocol", "kind"],
        )
        read_ahead = GaugeMetricFamily(
            "mqcloud_broker_read_ahead_bytes",
            "Leased records a broker process keeps ahead of its consumers' room: held now,"
            " the most ever held, and its budget (BROKER_READ_AHEAD_MB)",
            labels=["broker", "process", "kind"],
        )
        refused = CounterMetricFamily(
            "mqcloud_broker_read_ahead_refused",
            "Deliveries a broker process sent back at once because its read-ahead budget was spent",
            labels=["broker", "process"],
        )
        wakeups = CounterMetricFamily(
            "mqcloud_broker_wakeups",
            "Notification wake-ups of a broker process: appends whose messages a consumer of"
            " the process claimed, waiters woken late for another process's claim, claims"
            " handed back to every process, and notification connections lost",
            labels=["broker", "process", "kind"],
        )
        store = GaugeMetricFamily(
            "mqcloud_broker_store_write_ms",
            "A broker process's store writes (appends) in the last minute, as the engine"
            " timed them: the 99th percentile (a bucket's bound) and the slowest, in ms",
            labels=["broker", "process", "kind"],
        )
        writes = GaugeMetricFamily(
            "mqcloud_broker_store_writes_last_minute",
            "Store writes (appends) a broker process made in the last minute",
            labels=["broker", "process"],
        )
        for (bid, process), doc in sorted(self.reports.items()):
            timed = doc.get("store_writes")
            if isinstance(timed, dict) and isinstance(timed.get("count"), int):
                writes.add_metric([bid, process], timed["count"])
                for kind in ("p99", "max"):
                    if isinstance(timed.get(f"{kind}_ms"), int | float):
                        store.add_metric([bid, process, kind], timed[f"{kind}_ms"])
            if process == "0":
                serving.add_metric([bid], 1 if doc.get("state") == "serving" else 0)
            protocol_errors = doc.get("protocol_errors")
            if isinstance(protocol_errors, dict):
                for protocol, kinds in sorted(protocol_errors.items()):
                    for kind, count in sorted(kinds.items()) if isinstance(kinds, dict) else ():
                        if isinstance(count, int):
                            errors.add_metric([bid, process, protocol, kind], count)
            budget = doc.get("read_ahead")
            if isinstance(budget, dict):
                for kind in ("held", "peak", "limit"):
                    value = budget.get(f"{kind}_bytes")
                    if isinstance(value, int):
                        read_ahead.add_metric([bid, process, kind], value)
                if isinstance(budget.get("refused"), int):
                    refused.add_metric([bid, process], budget["refused"])
            woken = doc.get("wakeups")
            if isinstance(woken, dict):
                for kind in ("claimed", "deferred", "handed_back", "reconnects"):
                    if isinstance(woken.get(kind), int):
                        wakeups.add_metric([bid, process, kind], woken[kind])
        yield serving
        yield errors
        yield read_ahead
        yield refused
        yield wakeups
        yield store
        yield writes


@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    """Catalog and health gauges in the Prometheus text format."""
    registry = CollectorRegistry()
    up = Gauge(
        "mqcloud_dependency_up", "Whether a dependency answers", ["dependency"], registry=registry
    )
    pg_ok, _ = _check_postgres()
    redis_ok, _ = _check_redis()
    up.labels("postgres").set(1 if pg_ok else 0)
    up.labels("redis").set(1 if redis_ok else 0)
    if redis_ok:
        registry.register(_ReportCollector(_broker_reports()))
    if pg_ok:
        objects = Gauge(
            "mqcloud_catalog_objects", "Catalog objects by kind", ["kind"], registry=registry
        )
        for kind, model in (
            ("topic", Topic),
            ("app", App),
            ("producer", ProducerPolicy),
            ("consumer", ConsumerPolicy),
            ("broker", Broker),
        ):
            objects.labels(kind).set(model.objects.count())
        brokers = Gauge(
            "mqcloud_broker_up", "Broker liveness from heartbeats", ["broker"], registry=registry
        )
        age = Gauge(
            "mqcloud_broker_heartbeat_age_seconds",
            "Seconds since the last heartbeat",
            ["broker"],
            registry=registry,
        )
        now = timezone.now()
        for b in Broker.objects.all():
            brokers.labels(str(b.id)).set(1 if b.status == Broker.Status.UP else 0)
            if b.last_heartbeat:
                age.labels(str(b.id)).set((now - b.last_heartbeat).total_seconds())
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)
