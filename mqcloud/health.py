"""``/healthz`` (PostgreSQL and Redis reachability) and ``/metrics`` (Prometheus format)."""

from __future__ import annotations

import time

import redis
from django.conf import settings
from django.db import connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils import timezone
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Gauge, generate_latest

from brokers.models import App, Broker, ConsumerPolicy, ProducerPolicy, Topic


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


@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    """200 when PostgreSQL and Redis answer, 503 otherwise; the body says which failed."""
    started = time.monotonic()
    pg_ok, pg = _check_postgres()
    redis_ok, red = _check_redis()
    ok = pg_ok and redis_ok
    return JsonResponse(
        {
            "status": "ok" if ok else "unavailable",
            "postgres": pg,
            "redis": red,
            "elapsed_ms": round((time.monotonic() - started) * 1000, 1),
        },
        status=200 if ok else 503,
    )


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
