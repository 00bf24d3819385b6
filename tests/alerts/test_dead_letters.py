"""Dead-letter alerts: a consumer whose dead letters grew since the last check alerts its
team once per throttle window; counts are kept between checks; alerts off: not checked."""

from __future__ import annotations

import pytest
import redis
from django.conf import settings as django_settings
from django.core import mail

from brokers.catalog_loader import publish
from brokers.engine import RETRY_PARTITION, Message, RetryType
from brokers.models import ConsumerPolicy
from mqcloud.alerts.dead_letters import LAST_COUNTS, check_dead_letters
from mqcloud.alerts.models import AlertEvent
from tests.alerts.test_backlog import backlog_consumer, webhook  # noqa: F401
from tests.engine_calls import engine_call

pytestmark = pytest.mark.django_db


def kill(n: int) -> None:
    """``n`` new messages fail twice: with the policy's one retry (err_times=1) they go
    to the dead letters (nothing else is stored, so the second fetch takes the retries)."""

    async def fail(engine, partition: int | None = None) -> None:
        got = await engine.fetch("busy", "slow-app", count=n, owner="c")
        assert len(got.messages) == n and (partition is None or got.partition == partition)
        await engine.ack(
            "busy",
            "slow-app",
            got.partition,
            [d.index for d in got.messages],
            retry_type=RetryType.EXCEPTION,
            owner="c",
            token=got.lock_token,
        )

    async def run(engine):
        dead = (await engine.retry_counts("busy", "slow-app"))[1]
        await engine.append("busy", "slow-app", [Message(b"x") for _ in range(n)], partition=0)
        await fail(engine, 0)
        await engine.resend_retries("busy", "slow-app")
        await fail(engine, RETRY_PARTITION)
        assert (await engine.retry_counts("busy", "slow-app"))[1] == dead + n

    engine_call(run)


def test_new_dead_letters_alert_the_team(backlog_consumer, webhook):  # noqa: F811
    client = redis.Redis.from_url(django_settings.REDIS_URL)
    client.delete(LAST_COUNTS)
    engine_call(lambda engine: engine.erase_topic("busy"))  # what earlier tests stored there
    ConsumerPolicy.objects.filter(pk=backlog_consumer.pk).update(err_times=1)
    publish()
    assert check_dead_letters() == []  # none yet
    kill(2)
    (event,) = check_dead_letters()
    assert event.kind == AlertEvent.Kind.DEAD_LETTERS and event.target == "consumer:slow-app.busy"
    assert event.detail == {"new": 2, "dead_letters": 2}
    assert mail.outbox[-1].to == ["watcher@example.test"] and webhook[-1]["kind"] == "dead_letters"
    assert check_dead_letters() == []  # nothing new
    kill(1)
    assert check_dead_letters() == []  # new, but within the throttle window
    client.delete("mqcloud:alert:dead-letters:slow-app.busy")
    kill(1)
    (again,) = check_dead_letters()
    assert again.detail["dead_letters"] >= 3
    ConsumerPolicy.objects.filter(pk=backlog_consumer.pk).update(backlog_alert_enabled=False)
    client.delete("mqcloud:alert:dead-letters:slow-app.busy")
    kill(1)
    assert check_dead_letters() == []  # alerts off: not checked
    client.close()
