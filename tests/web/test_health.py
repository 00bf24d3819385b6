"""/healthz and /metrics against the session's real PostgreSQL and Redis."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.django_db


def test_healthz_ok(client):
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() | {"elapsed_ms": 0} == {
        "status": "ok",
        "postgres": "ok",
        "redis": "ok",
        "elapsed_ms": 0,
    }


def test_healthz_reports_redis_down(client, settings):
    from tests.scripts_path import free_port

    settings.REDIS_URL = f"redis://127.0.0.1:{free_port()}/0"
    response = client.get("/healthz")
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "unavailable"
    assert body["postgres"] == "ok"
    assert body["redis"] == "ConnectionError"


def test_healthz_rejects_post(client):
    assert client.post("/healthz").status_code == 405


def test_metrics_prometheus_text(client):
    from tests import factories

    factories.cluster_with_brokers()
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain")
    text = response.content.decode()
    assert 'mqcloud_dependency_up{dependency="redis"} 1.0' in text
    assert 'mqcloud_catalog_objects{kind="broker"} 2.0' in text
    assert 'mqcloud_broker_up{broker="1"} 1.0' in text
