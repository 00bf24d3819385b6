"""Process-exit alerts: the exits of one process since the last check make one alert
with how often, at most once per throttle window (a process dying in a loop does not
flood the admins); another process alerts on its own; a record with a time nobody can
read still alerts."""

from __future__ import annotations

import pytest
import redis
from django.conf import settings as django_settings

from brokers.engine import record_exit
from mqcloud.alerts.models import AlertEvent
from mqcloud.alerts.processes import check_processes
from tests import factories
from tests.engine_calls import engine_call

pytestmark = pytest.mark.django_db


def died(service: str, process: int, pid: int, at: object = 1_790_000_000.0) -> None:
    doc = {"service": service, "process": process, "pid": pid, "how": "was killed by SIGKILL"}
    engine_call(lambda e: record_exit(e.redis, {**doc, "at": at}))


def test_a_process_dying_in_a_loop_alerts_once(settings):
    client = redis.Redis.from_url(django_settings.REDIS_URL)
    client.flushall()  # other tests' exits and throttle keys
    client.close()
    factories.user("root", admin=True)
    for pid in (101, 102, 103):
        died("broker 7", 2, pid)
    died("broker 7", 3, 201, at=1e300)  # a time nobody can read
    fired = sorted(check_processes(), key=lambda e: e.target)
    assert [(e.kind, e.target) for e in fired] == [
        (AlertEvent.Kind.PROCESS_EXIT, "process:broker 7/2"),
        (AlertEvent.Kind.PROCESS_EXIT, "process:broker 7/3"),
    ]
    assert "(pid 103) was killed by SIGKILL at 2026-" in fired[0].message
    assert "and 2 more times since the last check" in fired[0].message
    assert fired[0].detail["exits"] == 3
    assert "at an unknown time; it was started again" in fired[1].message
    died("broker 7", 2, 104)
    assert check_processes() == []  # within the throttle window
