"""Backlog alerts: count AND age thresholds, throttling, e-mail and webhook delivery."""

from __future__ import annotations

import time

import pytest
import redis
from django.conf import settings as django_settings
from django.core import mail

from brokers.catalog_loader import publish
from brokers.models import ConsumerPolicy, ProducerPolicy, Team
from mqcloud.alerts.backlog import check_backlogs
from mqcloud.alerts.models import AlertEvent
from tests import factories
from tests.alerts.conftest import forget_alert_throttles
from tests.engine_calls import engine_call
from tests.http_sink import http_sink

pytestmark = pytest.mark.django_db


@pytest.fixture
def webhook(settings):
    """A local HTTP server that records the alerts posted to it."""
    with http_sink(204) as sink:
        settings.ALERT_WEBHOOK_URL = f"{sink.url}/hook"
        yield sink.sent


@pytest.fixture
def backlog_consumer():
    """A consumer with low thresholds (3 messages, 1 s), and no throttle left from before."""
    forget_alert_throttles()
    team = Team.objects.create(name="alerting")
    factories.user("watcher", team=team)
    topic = factories.topic("busy", factories.cluster_with_brokers("ac"), team, 2, 1)
    app, _ = factories.app("slow-app", team)
    ProducerPolicy.objects.create(topic=topic, app=app)
    policy = ConsumerPolicy.objects.create(
        topic=topic,
        app=app,
        start_position="earliest",
        backlog_alert_count=3,
        backlog_alert_age_s=1,
    )
    publish()
    return policy


def produce(n: int) -> None:
    from brokers.engine import Message

    async def run(engine):
        for i in range(n):
            await engine.append("busy", "slow-app", [Message(f"m{i}".encode())], partition=i % 2)

    engine_call(run)


def test_count_and_age_must_both_be_exceeded(backlog_consumer, webhook):
    produce(2)
    time.sleep(1.1)
    assert check_backlogs() == []  # old enough, but only 2 < 3
    produce(2)
    fired = check_backlogs()
    assert len(fired) == 1  # 4 ≥ 3 and the oldest is > 1 s old
    event = AlertEvent.objects.get()
    assert event.target == "consumer:slow-app.busy" and event.detail["lag"] == 4
    assert event.emailed and mail.outbox[0].to == ["watcher@example.test"]
    assert event.webhook_status == "204"
    assert webhook[0]["target"] == "consumer:slow-app.busy"
    assert check_backlogs() == []  # throttled
    assert AlertEvent.objects.count() == 1


def test_young_backlog_does_not_alert(backlog_consumer, webhook):
    ConsumerPolicy.objects.filter(pk=backlog_consumer.pk).update(backlog_alert_age_s=3600)
    produce(5)
    assert check_backlogs() == []
    assert webhook == []


def test_disabled_alerts_are_skipped(backlog_consumer, webhook):
    ConsumerPolicy.objects.filter(pk=backlog_consumer.pk).update(backlog_alert_enabled=False)
    produce(5)
    time.sleep(1.1)
    assert check_backlogs() == []


def test_every_check_records_each_consumers_latest_lag(backlog_consumer, client, settings):
    """Alerting on or off, each run keeps every consumer's lag (batched), and the
    dashboard's "top consumers by lag" and a lag sort read it in one indexed query."""
    from mqcloud.alerts import backlog
    from mqcloud.alerts.models import LatestLag
    from mqcloud.console import lag

    quiet = ConsumerPolicy.objects.create(
        topic=backlog_consumer.topic,
        app=factories.app("quiet-app", backlog_consumer.app.team)[0],
        start_position="earliest",
        backlog_alert_enabled=False,
    )
    redis.Redis.from_url(django_settings.REDIS_URL).flushall()  # earlier tests' messages
    publish()
    settings.ALERT_THROTTLE_SECONDS = 3600
    backlog.LAG_BATCH = 1  # two batches: both are written
    try:
        produce(5)
        check_backlogs()
    finally:
        backlog.LAG_BATCH = 500
    recorded = {r.consumer_id: r for r in LatestLag.objects.all()}
    assert recorded[backlog_consumer.pk].lag == 5 and recorded[quiet.pk].lag == 5
    assert recorded[backlog_consumer.pk].oldest_age_s is not None
    LatestLag.objects.filter(consumer=quiet).update(lag=1)
    top = lag.top_lagging(ConsumerPolicy.objects.all(), 10)
    assert [c.name for c in top] == ["slow-app.busy", "quiet-app.busy"]
    client.force_login(factories.user("root", admin=True))
    dashboard = client.get("/")
    assert [c.name for c in dashboard.context["top_lagging"]] == ["slow-app.busy", "quiet-app.busy"]
    assert 'href="/consumers/?sort=-lag"' in dashboard.content.decode()
    lag.LIVE_SORT_LIMIT, before = 0, lag.LIVE_SORT_LIMIT  # a "fleet": order by what was recorded
    try:
        by_lag = client.get("/consumers/?sort=lag").context
    finally:
        lag.LIVE_SORT_LIMIT = before
    assert by_lag["recorded"] and [r.consumer.name for r in by_lag["rows"]] == [
        "quiet-app.busy",
        "slow-app.busy",
    ]
    assert [r.lag for r in by_lag["rows"]] == [5, 5]  # the rows show the live lag


def test_a_fan_out_queue_alerts_for_its_lagging_member_only(backlog_consumer, webhook):
    """A fan-out queue's subscribers each consume from their own progress: its consumer
    lags by its slowest member's lag — a member that acked everything is not behind, and
    the group's own progress (no subscriber moves it) no longer makes the queue alert
    for everything it ever stored."""
    from brokers.models import Topic
    from mqcloud.alerts.models import LatestLag

    redis.Redis.from_url(django_settings.REDIS_URL).flushall()  # earlier tests' messages
    Topic.objects.filter(code="busy").update(delivery_mode="FanOutWithAck")
    publish()

    async def join(engine) -> None:
        for member in ("fast", "slow"):
            await engine.join("busy", "slow-app", member)

    engine_call(join)
    produce(4)

    def acks_all(member: str):
        async def run(engine) -> None:
            for _ in (0, 1):  # a lease takes from one partition
                got = await engine.lease("busy", "slow-app", count=10, owner="o", client_id=member)
                for d in got.deliveries:
                    await engine.settle(
                        "busy", "slow-app", d.partition, [d.index], client_id=member
                    )

        return run

    engine_call(acks_all("fast"))
    fired = check_backlogs()
    assert [(e.target, e.detail["client_id"], e.detail["lag"]) for e in fired] == [
        ("consumer:slow-app.busy", "slow", 4)
    ]
    assert LatestLag.objects.get(consumer=backlog_consumer).lag == 4

    engine_call(acks_all("slow"))
    assert check_backlogs() == []
    assert LatestLag.objects.get(consumer=backlog_consumer).lag == 0


def test_a_broadcast_consumer_alerts_for_its_lagging_client_and_lists_its_lag(
    backlog_consumer, webhook, client
):
    """Each broadcast client consumes from its own progress: the consumer alerts for the
    client behind (count only) and every list shows the slowest client's lag — the
    group's own progress, which no broadcast client moves, made the list, the API and
    the dashboard show everything stored as its lag."""
    from mqcloud.alerts.models import LatestLag

    redis.Redis.from_url(django_settings.REDIS_URL).flushall()  # earlier tests' messages
    ConsumerPolicy.objects.filter(pk=backlog_consumer.pk).update(mode=ConsumerPolicy.Mode.BROADCAST)
    publish()
    produce(6)

    def consume(client_id: str, acked: int):
        async def run(engine) -> None:
            done = 0
            for _ in (0, 1):  # a fetch takes from one partition
                got = await engine.fetch(
                    "busy", "slow-app", count=10, owner=client_id, address="10.0.0.9:1",
                    client_id=client_id,
                )  # fmt: skip
                indexes = [d.index for d in got.messages][: max(0, acked - done)]
                done += len(indexes)
                if indexes:
                    await engine.ack(
                        "busy", "slow-app", got.partition, indexes, client_id=client_id
                    )

        return run

    engine_call(consume("fast", 6))
    engine_call(consume("slow", 2))
    fired = check_backlogs()
    assert [(e.detail["client_id"], e.detail["lag"]) for e in fired] == [("slow", 4)]
    assert LatestLag.objects.get(consumer=backlog_consumer).lag == 4
    client.force_login(factories.user("watcher-root", admin=True))
    listed = client.get("/consumers/").context["rows"]
    assert [(r.consumer.name, r.lag) for r in listed] == [("slow-app.busy", 4)]
    api = client.get(f"/api/v1/consumers/{backlog_consumer.name}/").json()
    assert api["lag"] == 4
