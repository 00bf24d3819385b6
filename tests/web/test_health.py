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

    async def report(doc: dict | None, name: str = "broker:57") -> None:
        redis = aioredis.from_url(redis_url)
        try:
            if doc is None:
                await withdraw_report(redis, name)
            else:
                await publish_report(redis, name, doc, valid_for_s=30)
        finally:
            await redis.aclose()

    doc = {"state": "removed", "reason": "broker 57 was removed from the catalog"}
    read_ahead = {"held_bytes": 2048, "peak_bytes": 4096, "limit_bytes": 67108864, "refused": 5}
    asyncio.run(
        report({**doc, "protocol_errors": {"zbus": {"bad_request": 3}}, "read_ahead": read_ahead})
    )
    try:
        assert client.get("/healthz").json()["brokers"]["57"] == doc | {"processes": 1}
        text = client.get("/metrics").content.decode()
        assert 'mqcloud_broker_serving{broker="57"} 0.0' in text
        assert (
            "mqcloud_broker_protocol_errors_total"
            '{broker="57",kind="bad_request",process="0",protocol="zbus"} 3.0' in text
        )
        assert 'mqcloud_broker_read_ahead_bytes{broker="57",kind="held",process="0"} 2048.0' in text
        assert (
            'mqcloud_broker_read_ahead_bytes{broker="57",kind="limit",process="0"} 6.7108864e+07'
            in text
        )
        assert 'mqcloud_broker_read_ahead_refused_total{broker="57",process="0"} 5.0' in text
        # a worker process of --processes reports under broker:57:<n>, per process in
        # /metrics; /healthz shows the first process's state and how many processes report
        worker = {
            "state": "serving",
            "process": 2,
            "protocol_errors": {"vibemq": {"bad_frame": 4}},
            "wakeups": {"claimed": 7, "deferred": 9, "handed_back": 2, "reconnects": 1},
            "store_writes": {"count": 1200, "p99_ms": 5.0, "max_ms": 12.5},
        }
        asyncio.run(report(worker, "broker:57:2"))
        assert client.get("/healthz").json()["brokers"]["57"] == doc | {"processes": 2}
        text = client.get("/metrics").content.decode()
        assert 'mqcloud_broker_serving{broker="57"} 0.0' in text  # the first process's
        assert [line for line in text.splitlines() if '_serving{broker="57"' in line] == [
            'mqcloud_broker_serving{broker="57"} 0.0'
        ]
        assert (
            "mqcloud_broker_protocol_errors_total"
            '{broker="57",kind="bad_frame",process="2",protocol="vibemq"} 4.0' in text
        )
        assert 'mqcloud_broker_wakeups_total{broker="57",kind="claimed",process="2"} 7.0' in text
        assert 'mqcloud_broker_wakeups_total{broker="57",kind="deferred",process="2"} 9.0' in text
        assert (
            'mqcloud_broker_wakeups_total{broker="57",kind="handed_back",process="2"} 2.0' in text
        )
        assert 'mqcloud_broker_store_write_ms{broker="57",kind="p99",process="2"} 5.0' in text
        assert 'mqcloud_broker_store_write_ms{broker="57",kind="max",process="2"} 12.5' in text
        assert 'mqcloud_broker_store_writes_last_minute{broker="57",process="2"} 1200.0' in text
        # a malformed report is left out, not a 500
        asyncio.run(
            report(
                {"protocol_errors": {"zbus": 3}, "wakeups": "x", "store_writes": [1]},
                "broker:57:3",
            )
        )
        assert client.get("/metrics").status_code == 200
    finally:
        for name in ("broker:57", "broker:57:2", "broker:57:3"):
            asyncio.run(report(None, name))
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
