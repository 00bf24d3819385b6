"""The daily capacity report (console-features "daily capacity report"): what the store
holds per node and per cluster, the day's traffic (the engine's day totals, else the
rollups), the topics storing
the most; made once a day by beat (catching up a missed day), or for today on demand;
the page shows each node's growth and days until full, and only platform admins see it."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest
from django.core import mail
from django.test import Client
from django.utils import timezone

from brokers.engine import Engine, Message
from mqcloud import tasks
from mqcloud.approvals.models import AuditEvent
from mqcloud.console import capacity
from mqcloud.console.models import CapacityReport
from pipeline.models import TrafficMinute
from tests import factories
from tests.engine_calls import engine_call

pytestmark = pytest.mark.django_db


def produce(topic: str, app: str, per_partition: dict[int, int]) -> None:
    async def run(engine: Engine) -> None:
        for partition, n in per_partition.items():
            for _ in range(n):
                await engine.append(topic, app, [Message(b"x" * 10)], partition=partition)

    engine_call(run)


def rollup(topic: str, day: date, minute: int, messages: int, size: int) -> None:
    at = datetime(day.year, day.month, day.day, tzinfo=UTC) + timedelta(minutes=minute)
    TrafficMinute.objects.create(
        dimension=TrafficMinute.Dimension.TOPIC,
        name=topic,
        minute=at,
        messages=messages,
        bytes=size,
        latency_p50_ms=1,
        latency_p99_ms=2,
    )


def test_a_report_counts_what_is_stored_and_produced(world):
    produce("orders", "shop", {0: 3, 1: 2})
    day = timezone.now().date() - timedelta(days=1)
    rollup("orders", day, 0, 40, 4000)
    rollup("orders", day, 1439, 2, 200)  # the day's last minute
    rollup("orders", day + timedelta(days=1), 0, 99, 9900)  # the next day: not counted
    assert capacity.make_missing_report() is True
    report = CapacityReport.objects.get(day=day)
    assert not report.partial
    (cluster,) = report.clusters
    assert cluster == {
        "cluster": world.topic.cluster.name,
        "topics": 2,
        "partitions": 3,
        "stored_messages": 5,
        "produced_messages": 42,
        "produced_bytes": 4200,
    }
    assert report.top_topics == [
        {"code": "orders", "cluster": world.topic.cluster.name, "stored": 5}
    ]
    (node,) = report.store
    assert node["used_bytes"] > 0 and node["keys"] > 0
    assert capacity.make_missing_report() is False  # made once


def test_the_days_traffic_comes_from_the_engine_without_the_pipeline(world):
    """Where the pipeline never ran (no rollups), the engine's day totals give the day's
    traffic, whatever protocol produced it; they win over rollups where both exist."""
    produce("orders", "shop", {0: 3, 1: 2})
    today = timezone.now().date()

    async def minutes(engine: Engine):  # the topic page's per-minute view of the same day
        start = int(datetime(today.year, today.month, today.day, tzinfo=UTC).timestamp())
        return await engine.traffic("topic", "orders", start * 1000, (start + 86_400) * 1000)

    stored_bytes = sum(m.produced_bytes for m in engine_call(minutes))
    assert stored_bytes > 5 * 10  # the stored records, bodies and their properties
    (cluster,) = capacity.build(today, partial=True).clusters
    assert (cluster["produced_messages"], cluster["produced_bytes"]) == (5, stored_bytes)
    rollup("orders", today, 0, 40, 4000)  # the pipeline, late or partial: not added
    (cluster,) = capacity.build(today, partial=True).clusters
    assert (cluster["produced_messages"], cluster["produced_bytes"]) == (5, stored_bytes)


def test_a_partial_report_is_replaced_after_its_day(world):
    yesterday = timezone.now().date() - timedelta(days=1)
    capacity.build(yesterday, partial=True)
    assert capacity.make_missing_report() is True
    assert CapacityReport.objects.get(day=yesterday).partial is False


def node(used: int, limit: int = 0) -> dict:
    return {"name": "r1", "used_bytes": used, "max_bytes": limit, "keys": 1}


def test_the_outlook_measures_growth_and_days_until_full():
    today = date(2026, 12, 4)
    reports = [
        CapacityReport(day=today, store=[node(1_600, 10_000)]),
        CapacityReport(day=today - timedelta(days=2), store=[node(1_400, 10_000)]),
        CapacityReport(day=today - timedelta(days=4), store=[node(1_200, 10_000)]),
        CapacityReport(day=today - timedelta(days=20), store=[node(1, 10_000)]),  # too old
    ]
    (out,) = capacity.outlook(reports)
    assert (out.growth_per_day, out.days_left, out.used_percent) == (100, 84.0, 16.0)
    (alone,) = capacity.outlook(reports[:1])
    assert alone.growth_per_day is None and alone.days_left is None
    (unbounded,) = capacity.outlook(
        [CapacityReport(day=today, store=[node(5)]), CapacityReport(day=today, store=[])]
    )
    assert unbounded.used_percent is None and unbounded.days_left is None


def test_only_platform_admins_see_and_make_reports(client, world):
    client.force_login(world.alice)
    assert client.get("/capacity/").status_code == 403
    assert client.post("/capacity/now/").status_code == 403
    client.force_login(world.root)
    assert "No report yet" in client.get("/capacity/").content.decode()
    made = client.post("/capacity/now/")
    assert made.status_code == 302 and made["Location"] == "/capacity/"
    today = timezone.now().date()
    assert CapacityReport.objects.get(day=today).partial
    page = client.get("/capacity/")
    assert page.context["latest"].day == today and len(page.context["nodes"]) == 1
    assert f'data-cluster="{world.topic.cluster.name}"' in page.content.decode()
    assert AuditEvent.objects.filter(
        action="capacity-report-made", target=f"capacity:{today.isoformat()}"
    ).exists()


def test_the_api_lists_reads_and_makes_reports(client, world):
    api = "/api/v1/capacity-reports/"
    client.force_login(world.alice)
    assert client.get(api).status_code == 403
    assert client.post(f"{api}make-today/").status_code == 403
    client.force_login(world.root)
    made = client.post(f"{api}make-today/")
    assert made.status_code == 200 and made.json()["partial"] is True
    day = made.json()["day"]
    assert made.json()["clusters"][0]["topics"] == 2
    assert [r["day"] for r in client.get(api).json()["results"]] == [day]
    assert client.get(f"{api}{day}/").json()["store"][0]["used_bytes"] > 0
    assert client.get(f"{api}2001-02-30/").status_code == 404
    assert client.get(f"{api}1999-01-01/").status_code == 404


def test_the_days_report_is_e_mailed_to_the_admins_once(world, settings):
    settings.CONSOLE_PUBLIC_URL = "https://mq.example.test/"
    factories.user("ops", admin=True)
    gone = factories.user("gone", admin=True)
    gone.is_active = False
    gone.save()
    produce("orders", "shop", {0: 2})
    today = timezone.now().date()
    yesterday = today - timedelta(days=1)
    (store_node,) = capacity.build(today, partial=True).store  # on demand: never e-mailed
    CapacityReport.objects.create(  # the growth is measured against it
        day=yesterday - timedelta(days=6), store=[{**store_node, "used_bytes": 1}]
    )
    mail.outbox.clear()
    assert tasks.make_capacity_report() is True
    (sent,) = mail.outbox
    assert sorted(sent.to) == ["ops@example.test", "root@example.test"]
    assert sent.subject.startswith(f"[mqcloud] capacity report {yesterday.isoformat()}")
    assert f"{world.topic.cluster.name}: 2 topics" in sent.body
    assert "orders (" in sent.body and ": 2\n" in sent.body  # the topic storing the most
    assert "a day" in sent.body  # the node's growth against the report of a week before
    assert "https://mq.example.test/capacity/" in sent.body
    assert CapacityReport.objects.get(day=yesterday).emailed_at is not None
    assert tasks.make_capacity_report() is False
    assert len(mail.outbox) == 1  # once
    page = Client()
    page.force_login(world.root)
    # the history says which day's report went out
    assert "e-mailed to the platform admins" in page.get("/capacity/").content.decode()


def test_a_report_mail_that_fails_is_sent_by_the_next_run(world, settings, smtp_down):
    assert tasks.make_capacity_report() is True
    yesterday = timezone.now().date() - timedelta(days=1)
    assert CapacityReport.objects.get(day=yesterday).emailed_at is None
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    mail.outbox.clear()
    assert tasks.make_capacity_report() is False  # made before: only e-mailed now
    assert len(mail.outbox) == 1
    assert CapacityReport.objects.get(day=yesterday).emailed_at is not None


def test_report_mail_can_be_turned_off(world, settings):
    settings.CAPACITY_REPORT_MAIL = False
    mail.outbox.clear()
    assert tasks.make_capacity_report() is True
    assert mail.outbox == []
