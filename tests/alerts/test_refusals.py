"""Produce-refusal alerts: an app whose messages the engine refused at least the
threshold of times on a topic in the last hour alerts its team, with why."""

from __future__ import annotations

import pytest
import redis
from django.conf import settings as django_settings

from brokers.catalog_loader import publish
from brokers.engine import EngineError, Message
from brokers.models import ProducerPolicy, Team
from mqcloud.alerts.models import AlertEvent
from mqcloud.alerts.refusals import check_refusals
from tests import factories
from tests.engine_calls import engine_call

pytestmark = pytest.mark.django_db


@pytest.fixture
def producers():
    """Topic ``intake``: ``busy`` produces with a rate limit of 2/s; ``outsider`` (team
    ``others``) has no producer policy."""
    client = redis.Redis.from_url(django_settings.REDIS_URL)
    client.flushall()
    client.close()
    team = Team.objects.create(name="intake-team")
    factories.user("intake-watcher", team=team)
    topic = factories.topic("intake", factories.cluster_with_brokers("in"), team, 1, 1)
    busy, _ = factories.app("busy", team)
    factories.app("outsider", Team.objects.create(name="others"))
    ProducerPolicy.objects.create(topic=topic, app=busy, rate_limit=2)
    publish()


def produce(app: str, n: int, body: bytes = b"x") -> int:
    """Produce ``n`` messages one by one as ``app``; how many were refused."""

    async def run(engine) -> int:
        refused = 0
        for _ in range(n):
            try:
                await engine.append("intake", app, [Message(body)])
            except EngineError:
                refused += 1
        return refused

    return engine_call(run)


def test_an_app_refused_too_often_alerts_its_team_once(producers, settings):
    settings.PRODUCE_REFUSAL_ALERT_PER_HOUR = 5
    assert produce("busy", 6) == 4  # 2 admitted, 4 over the rate limit
    assert produce("outsider", 3) == 3  # no policy
    assert check_refusals() == []  # 4 and 3 < 5
    produce("busy", 1, body=b"x" * (5 * 1024 * 1024))  # too large (or over the limit)
    produce("outsider", 2)
    events = check_refusals()
    assert sorted((e.target, e.team.name, e.detail["refused"]) for e in events) == [
        ("producer:busy.intake", "intake-team", 5),
        ("producer:outsider.intake", "others", 5),
    ]
    outsider = next(e for e in events if e.target == "producer:outsider.intake")
    assert outsider.detail["by_reason"] == {"not_allowed": 5}
    assert "not allowed 5" in outsider.message and outsider.kind == AlertEvent.Kind.PRODUCE_REFUSALS
    produce("outsider", 5)
    assert check_refusals() == []  # throttled


def test_a_zero_threshold_turns_the_alert_off(producers, settings):
    settings.PRODUCE_REFUSAL_ALERT_PER_HOUR = 0
    produce("outsider", 20)
    assert check_refusals() == []


def test_the_app_page_and_the_api_show_what_was_refused(producers, client):
    """A developer sees why the app's messages are refused without waiting for the alert:
    on its console page and at /api/v1/apps/{code}/refusals/."""
    from rest_framework.test import APIClient

    produce("busy", 4)  # 2 over the rate limit
    user = factories.user("intake-dev", team=Team.objects.get(name="intake-team"))
    client.force_login(user)
    page = client.get("/apps/busy/")
    assert page.status_code == 200
    rows = page.context["refusals"]
    assert rows == [{"topic": "intake", "refused": 2, "why": "over its rate limit 2"}]
    assert 'id="refusals"' in page.content.decode()
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {factories.token_for(user)}")
    assert api.get("/api/v1/apps/busy/refusals/").json() == [
        {"topic": "intake", "refused": 2, "by_reason": {"rate_limited": 2}}
    ]
    assert api.get("/api/v1/apps/outsider/refusals/").status_code == 404  # another team's
    quiet = client.get("/apps/outsider/")
    assert quiet.status_code == 404 or quiet.context["refusals"] == []
