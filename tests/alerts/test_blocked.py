"""Blocked-consumer alerts: a sequential consumer stuck on a message it keeps failing
(its ack index still, messages waiting, still fetching) alerts its team; one that moves
on, stopped fetching, or does not consume in order does not."""

from __future__ import annotations

import time

import pytest
import redis
from django.conf import settings as django_settings

from brokers.catalog_loader import publish
from brokers.engine import Message, RetryType
from brokers.models import ConsumerPolicy, ProducerPolicy, Team, Topic
from mqcloud.alerts.blocked import check_blocked
from mqcloud.alerts.models import AlertEvent
from tests import factories
from tests.engine_calls import engine_call

pytestmark = pytest.mark.django_db


@pytest.fixture
def ordered(settings):
    """Sequential topic ``steps`` (2 partitions) consumed by ``worker`` (alerts on),
    ``muted`` (alerts off); normal topic ``loose`` consumed by ``worker`` in no order,
    and by ``strict``, whose policy is sequential. A 1 s block time."""
    client = redis.Redis.from_url(django_settings.REDIS_URL)
    client.flushall()
    client.close()
    settings.CONSUMER_BLOCKED_ALERT_S = 1
    team = Team.objects.create(name="ordering")
    cluster = factories.cluster_with_brokers("or")
    steps = factories.topic("steps", cluster, team, 2, 1)
    steps.type = Topic.Type.SEQUENTIAL
    steps.save()
    loose = factories.topic("loose", cluster, team, 1, 1)
    apps = {code: factories.app(code, team)[0] for code in ("maker", "worker", "muted", "strict")}
    for topic in (steps, loose):
        ProducerPolicy.objects.create(topic=topic, app=apps["maker"])
        ConsumerPolicy.objects.create(topic=topic, app=apps["worker"], start_position="earliest")
    ConsumerPolicy.objects.create(
        topic=steps, app=apps["muted"], start_position="earliest", backlog_alert_enabled=False
    )
    ConsumerPolicy.objects.create(
        topic=loose, app=apps["strict"], start_position="earliest", sequential=True
    )
    publish()

    async def produce(engine) -> None:
        for topic, partitions in (("steps", 2), ("loose", 1)):
            for p in range(partitions):
                await engine.append(topic, "maker", [Message(b"a"), Message(b"b")], partition=p)

    engine_call(produce)


def attempt(topic: str, app: str, *, succeed: bool = False) -> None:
    """One fetch of ``app`` on ``topic`` (partition 0 first), failed or acked."""

    async def run(engine) -> None:
        got = await engine.fetch(topic, app, count=1, owner=app)
        if not got.messages:
            return
        kind = RetryType.NONE if succeed else RetryType.EXCEPTION
        await engine.ack(
            topic, app, got.partition, [d.index for d in got.messages], owner=app, retry_type=kind
        )

    engine_call(run)


def fired() -> list[tuple[str, list[int]]]:
    return [
        (e.target, [p["partition"] for p in e.detail["partitions"]])
        for e in AlertEvent.objects.filter(kind=AlertEvent.Kind.CONSUMER_BLOCKED).order_by("id")
    ]


def test_a_sequential_consumer_stuck_on_a_message_alerts_once(ordered):
    for app in ("worker", "muted"):
        attempt("steps", app)
    attempt("loose", "worker")  # fails too, but the message goes to its retries
    attempt("loose", "strict")
    assert check_blocked() == []  # first seen: the clock starts
    time.sleep(1.2)
    for app in ("worker", "muted"):
        attempt("steps", app)  # the same message again, failed again
    attempt("loose", "worker")
    attempt("loose", "strict")
    events = check_blocked()
    assert sorted(fired()) == [("consumer:strict.loose", [0]), ("consumer:worker.steps", [0])]
    for event in events:
        assert event.team.name == "ordering" and "blocked for 1 s" in event.message
        assert event.detail["partitions"][0]["index"] == 0
        assert event.message.endswith("partition 0, message 0")
    time.sleep(1.2)
    attempt("steps", "worker")
    assert check_blocked() == []  # throttled
    assert len(fired()) == 2


def test_a_consumer_that_moves_on_or_stops_fetching_is_not_blocked(ordered):
    attempt("steps", "worker")
    attempt("loose", "strict")
    assert check_blocked() == []
    time.sleep(1.2)
    attempt("steps", "worker", succeed=True)  # the ack index moved
    # strict stopped fetching: down, not blocked (the backlog alert's case)
    assert check_blocked() == []
    time.sleep(1.2)
    attempt("steps", "worker", succeed=True)  # moves on again
    assert check_blocked() == [] and fired() == []


def test_no_block_time_turns_the_alert_off(ordered, settings):
    attempt("steps", "worker")
    check_blocked()
    time.sleep(1.2)
    attempt("steps", "worker")
    settings.CONSUMER_BLOCKED_ALERT_S = 0
    assert check_blocked() == [] and fired() == []
