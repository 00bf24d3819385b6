"""Retention-loss alerts: a consumer that retention overtook alerts its team with what it
lost, whichever way it consumes (a pull consumer's fetch, a push consumer's lease); the
losses of a throttled alert are reported by the next; alerts off: settled silently."""

from __future__ import annotations

import pytest
import redis
from django.conf import settings as django_settings
from django.contrib.auth import get_user_model
from django.core import mail

from brokers.catalog_loader import publish
from brokers.engine import Message
from brokers.models import ConsumerPolicy, ProducerPolicy, Team, Topic
from mqcloud.alerts.models import AlertEvent
from mqcloud.alerts.retention_losses import check_retention_losses
from tests import factories
from tests.engine_calls import engine_call

pytestmark = pytest.mark.django_db


@pytest.fixture
def kept() -> Topic:
    """Topic ``kept`` (1 partition, the last 5 messages kept) of team ``keepers``, consumed
    by ``puller`` (fetches), ``pusher`` (leases) and ``silent`` (alerts off)."""
    client = redis.Redis.from_url(django_settings.REDIS_URL)
    client.flushall()  # earlier tests' losses and throttle keys
    client.close()
    team = Team.objects.create(name="keepers")
    factories.user("keeper", team=team)
    topic = factories.topic("kept", factories.cluster_with_brokers("kp"), team, 1, 1)
    Topic.objects.filter(pk=topic.pk).update(retention_max_count=5)
    maker, _ = factories.app("maker", team)
    ProducerPolicy.objects.create(topic=topic, app=maker)
    for code in ("puller", "pusher", "silent"):
        app, _ = factories.app(code, team)
        ConsumerPolicy.objects.create(
            topic=topic,
            app=app,
            start_position="earliest",
            backlog_alert_enabled=code != "silent",
        )
    publish()
    return topic


def produce(n: int) -> None:
    async def run(engine) -> None:
        for _ in range(n):
            await engine.append("kept", "maker", [Message(b"x")], partition=0)

    engine_call(run)


def consume(app: str, n: int) -> None:
    """``app`` takes and acknowledges ``n`` messages: puller by fetch and commit, the
    others by lease and settle."""

    async def run(engine) -> None:
        if app == "puller":
            got = await engine.fetch("kept", app, count=n, start_position="earliest")
            assert len(got.messages) == n
            await engine.commit(
                "kept",
                app,
                0,
                offset=got.start,
                next_offset=got.end,
                lock_time=got.lock_token,
            )
        else:
            got = await engine.lease("kept", app, count=n, owner="w")
            assert len(got.deliveries) == n
            await engine.settle("kept", app, 0, [d.index for d in got.deliveries])

    engine_call(run)


def trim() -> None:
    engine_call(lambda engine: engine.trim_all())


def test_consumers_overtaken_by_retention_alert_their_team(kept, client):
    produce(10)
    for app in ("puller", "pusher", "silent"):
        consume(app, 1)  # started: each stands at 1
    consume("pusher", 5)  # pusher at 6: past the cut
    assert check_retention_losses() == []  # nothing trimmed yet
    trim()  # keeps 5..9: puller and silent lost 1..4, pusher nothing
    (event,) = check_retention_losses()
    assert event.kind == AlertEvent.Kind.RETENTION_LOSS
    assert event.target == "consumer:puller.kept" and event.team.name == "keepers"
    assert event.detail == {
        "lost": 4,
        "topic": "kept",
        "retention_max_count": 5,
        "retention_max_age_s": None,
    }
    assert "lost 4 messages of kept" in event.message
    assert "the last 5 messages per partition" in event.message
    assert mail.outbox[-1].to == ["keeper@example.test"]
    client.force_login(
        get_user_model().objects.get(username="keeper")
    )  # on the consumer's page too
    page = client.get("/consumers/puller.kept/").content.decode()
    recent = page[page.index('id="recent-alerts"') :]
    assert "Messages lost to retention" in recent and "lost 4 messages of kept" in recent
    assert "No alerts fired" in client.get("/consumers/pusher.kept/").content.decode()
    assert check_retention_losses() == []  # reported: settled
    assert engine_call(lambda engine: engine.retention_losses()) == {}  # silent's too

    # within the throttle window the losses wait, and the next alert sums them
    produce(5)
    trim()  # keeps 10..14: puller (at 1, behind 5) lost 5..9, pusher (at 6) 6..9
    fired = {e.target: e.detail["lost"] for e in check_retention_losses()}
    assert fired == {"consumer:pusher.kept": 4}  # puller's alert is throttled
    produce(5)
    trim()  # keeps 15..19: both lost 10..14
    client = redis.Redis.from_url(django_settings.REDIS_URL)
    client.delete("mqcloud:alert:retention-loss:puller.kept")
    client.close()
    fired = {e.target: e.detail["lost"] for e in check_retention_losses()}
    assert fired == {"consumer:puller.kept": 10}
    # pusher's second loss waits for its window
    assert engine_call(lambda engine: engine.retention_losses()) == {("kept", "pusher"): 5}
