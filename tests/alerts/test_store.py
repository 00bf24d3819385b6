"""Store-slow alerts: a broker or HTTP-MQ process whose reported store writes of the last
minute were slower than the limits alerts the platform admins, once per throttle window;
fast writes, no writes, or a limit at 0 do not."""

from __future__ import annotations

import pytest
import redis
from django.conf import settings as django_settings
from django.core import mail

from brokers.engine import publish_report
from mqcloud.alerts.models import AlertEvent
from mqcloud.alerts.store import check_store_latency
from proxy.httpmq.report import BOARD as PROXY_BOARD
from tests import factories
from tests.engine_calls import engine_call

pytestmark = pytest.mark.django_db


def report(name: str, writes: dict | None, board: str | None = None) -> None:
    doc = {"pid": 4242} | ({"store_writes": writes} if writes is not None else {})
    engine_call(lambda e: publish_report(e.redis, name, doc, valid_for_s=60, board=board))


@pytest.fixture
def admin():
    client = redis.Redis.from_url(django_settings.REDIS_URL)
    client.flushall()  # other tests' reports and throttle keys
    client.close()
    return factories.user("root", admin=True)


def test_slow_store_writes_alert_the_admins_once(admin, settings):
    settings.STORE_SLOW_MAX_MS, settings.STORE_SLOW_P99_MS = 500, 400
    report("broker:1", {"count": 900, "p99_ms": 5.0, "max_ms": 120.0})  # fine
    report("broker:1:2", {"count": 0, "p99_ms": 0.0, "max_ms": 0.0})  # idle
    report("broker:2", None)  # an older process: no figures
    report("host:8081/0", {"count": 50, "p99_ms": 450.0, "max_ms": 480.0}, PROXY_BOARD)
    report("broker:3", {"count": 3000, "p99_ms": 10.0, "max_ms": 900.0})
    fired = {e.target: e for e in check_store_latency()}
    assert set(fired) == {"store:broker:3", "store:httpmq:host:8081/0"}
    broker = fired["store:broker:3"]
    assert broker.kind == AlertEvent.Kind.STORE_SLOW and broker.team is None
    assert "max 900 ms > 500 ms, over 3,000 writes" in broker.message
    assert "p99 450 ms > 400 ms" in fired["store:httpmq:host:8081/0"].message
    assert mail.outbox[-1].to == ["root@example.test"]
    assert check_store_latency() == []  # within the throttle window


def test_a_limit_at_zero_is_off(admin, settings):
    settings.STORE_SLOW_MAX_MS, settings.STORE_SLOW_P99_MS = 0, 400
    report("broker:3", {"count": 3000, "p99_ms": 10.0, "max_ms": 900.0})
    assert check_store_latency() == []
