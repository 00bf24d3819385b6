"""/healthz and /metrics against the session's real PostgreSQL and Redis."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.django_db


def test_healthz_ok(client):
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() | {"elapsed_ms": 0, "brokers": {}} == {
        "status": "ok",
        "postgres": "ok",
        "redis": "ok",
        "brokers": {},
        "elapsed_ms": 0,
    }


def test_broker_reports_show_in_healthz_and_metrics(client, redis_url):
    import asyncio

    import redis.asyncio as aioredis

    from brokers.engine import publish_report, withdraw_report

    async def report(doc: dict | None) -> None:
        redis = aioredis.from_url(redis_url)
        try:
            if doc is None:
                await withdraw_report(redis, "broker:57")
            else:
                await publish_report(redis, "broker:57", doc, valid_for_s=30)
        finally:
            await redis.aclose()

    doc = {"state": "removed", "reason": "broker 57 was removed from the catalog"}
    read_ahead = {"held_bytes": 2048, "peak_bytes": 4096, "limit_bytes": 67108864, "refused": 5}
    asyncio.run(
        report({**doc, "protocol_errors": {"zbus": {"bad_request": 3}}, "read_ahead": read_ahead})
    )
    try:
        assert client.get("/healthz").json()["brokers"]["57"] == doc
        text = client.get("/metrics").content.decode()
        assert 'mqcloud_broker_serving{broker="57"} 0.0' in text
        assert (
            'mqcloud_broker_protocol_errors_total{broker="57",kind="bad_request",protocol="zbus"}'
            " 3.0" in text
        )
        assert 'mqcloud_broker_read_ahead_bytes{broker="57",kind="held"} 2048.0' in text
        assert 'mqcloud_broker_read_ahead_bytes{broker="57",kind="limit"} 6.7108864e+07' in text
        assert 'mqcloud_broker_read_ahead_refused_total{broker="57"} 5.0' in text
    finally:
        asyncio.run(report(None))
    assert "57" not in client.get("/healthz").json()["brokers"]


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
