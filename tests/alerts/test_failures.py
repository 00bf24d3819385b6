"""Consume-failure alerts: a consumer that failed at least the threshold of messages in the
last hour alerts its team (once per throttle window); below it, or with alerts off, not."""

from __future__ import annotations

import pytest
import redis
from django.conf import settings as django_settings

from brokers.catalog_loader import publish
from brokers.engine import Message
from brokers.models import ConsumerPolicy
from mqcloud.alerts.failures import check_consume_failures
from mqcloud.alerts.models import AlertEvent
from tests import factories
from tests.alerts.conftest import watched_and_quiet
from tests.engine_calls import engine_call

pytestmark = pytest.mark.django_db


@pytest.fixture
def failing():
    """Topic ``flaky`` with consumers ``fail-app`` (alerts on) and ``quiet-app`` (off)."""
    return watched_and_quiet("failing", "flaky", "fail-app", "quiet-app")


def fail(app: str, n: int) -> None:
    """Produce ``n`` messages and have ``app``'s consumer nack each."""

    async def run(engine) -> None:
        await engine.append_many("flaky", "fail-app", [Message(b"x")] * n)
        got = await engine.lease("flaky", app, count=n, owner="w")
        assert len(got.deliveries) == n
        await engine.fail("flaky", app, 0, [d.index for d in got.deliveries])

    engine_call(run)


def test_a_consumer_failing_too_often_alerts_once(failing, settings):
    settings.CONSUME_FAILURE_ALERT_PER_HOUR = 10
    fail("fail-app", 9)
    fail("quiet-app", 30)  # alerts off: not checked
    assert check_consume_failures() == []  # 9 < 10
    fail("fail-app", 1)
    [event] = check_consume_failures()
    assert event.kind == AlertEvent.Kind.CONSUME_FAILURES
    assert event.target == "consumer:fail-app.flaky" and event.detail["failures"] == 10
    assert event.emailed
    fail("fail-app", 5)
    assert check_consume_failures() == []  # throttled
    assert AlertEvent.objects.count() == 1


def test_a_zero_threshold_turns_the_alert_off(failing, settings):
    settings.CONSUME_FAILURE_ALERT_PER_HOUR = 0
    fail("fail-app", 20)
    assert check_consume_failures() == []


def test_a_consumers_own_threshold_wins_over_the_default(failing, settings, client):
    """A consumer's ``failure_alert_per_hour`` (changed by a consumer_update application)
    is its threshold; 0 turns its alert off while the default is on; empty is the
    default."""
    settings.CONSUME_FAILURE_ALERT_PER_HOUR = 100
    policy = ConsumerPolicy.objects.get(app__code="fail-app")
    policy.failure_alert_per_hour = 3
    policy.save()
    fail("fail-app", 3)
    [event] = check_consume_failures()
    assert (event.detail["failures"], event.detail["threshold"]) == (3, 3)
    client.force_login(factories.user("flaky-root", admin=True))
    page = client.get("/consumers/fail-app.flaky/").content.decode()
    assert "≥ 3 failures in an hour" in page
    assert '<p id="consume-failures">3 messages failed in the last hour' in page

    redis.Redis.from_url(django_settings.REDIS_URL).flushall()  # the throttle and counts
    publish()
    policy.failure_alert_per_hour = 0
    policy.save()
    settings.CONSUME_FAILURE_ALERT_PER_HOUR = 1
    fail("fail-app", 5)
    assert check_consume_failures() == []
    assert 'id="failure-alert">off' in client.get("/consumers/fail-app.flaky/").content.decode()
    policy.failure_alert_per_hour = None
    policy.save()
    assert len(check_consume_failures()) == 1
    page = client.get("/consumers/fail-app.flaky/").content.decode()
    assert "≥ 1 failures in an hour" in page and "the platform's default" in page


def test_failures_held_back_by_the_send_back_limit_are_named(failing, settings, client):
    """A JMQ4 consumer acking failures with a retry type past its topic's send-back limit
    has them delivered again, not copied to its retry store: its page and its alert say
    how many, so its team knows why they came back at once."""
    from brokers.engine import RetryType

    settings.CONSUME_FAILURE_ALERT_PER_HOUR = 5
    failing.send_back_limit = 2
    failing.save()
    publish()

    async def run(engine) -> None:
        await engine.append_many("flaky", "fail-app", [Message(b"x")] * 6)
        for count in (2, 4):  # the bucket's 2 permits, then 4 more at once: held back
            got = await engine.fetch("flaky", "fail-app", count=count, owner="w")
            await engine.ack(
                "flaky", "fail-app", 0, [m.index for m in got.messages],
                retry_type=RetryType.EXCEPTION, owner="w", token=got.lock_token,
            )  # fmt: skip

    engine_call(run)
    [event] = check_consume_failures()
    assert event.detail["failures"] == 6 and event.detail["held_back"] == 4
    assert "(4 held back by the topic's send-back limit)" in event.message
    client.force_login(factories.user("flaky-root", admin=True))
    page = client.get("/consumers/fail-app.flaky/").content.decode()
    assert '<p id="consume-failures">6 messages failed in the last hour' in page
    assert '<span id="held-back">, 4 of them delivered again at once' in page
    assert "(2 a second) was reached" in page
