"""The sweep that fails applications left executing by a process that died."""

from __future__ import annotations

import threading
import uuid
from datetime import timedelta

import pytest
from django.conf import settings
from django.core import mail
from django.db import connection, transaction
from django.utils import timezone

from brokers.models import Team
from mqcloud.approvals import services
from mqcloud.approvals.models import Application, AuditEvent, Notification, Status
from mqcloud.celery import app as celery_app
from mqcloud.operations import task_running
from mqcloud.tasks import fail_interrupted_applications
from tests import factories

pytestmark = pytest.mark.django_db(transaction=True)
LIMIT = timedelta(seconds=settings.APPLICATION_EXECUTION_LIMIT_SECONDS)


@pytest.fixture
def team() -> Team:
    return Team.objects.create(name="red")


def executing(team: Team, target: str, *, age: timedelta, result: dict | None = None):
    """An application marked executing ``age`` ago (as a dead process would leave it)."""
    applicant = factories.user(f"u-{target}", team=team)
    app = Application.objects.create(
        kind="pause",
        applicant=applicant,
        team=team,
        payload={"consumer": target},
        target=f"consumer:{target}",
        status=Status.EXECUTING,
        decided_at=timezone.now() - age,
        result=result or {},
    )
    Application.objects.filter(pk=app.pk).update(updated_at=timezone.now() - age)
    return app


def test_stale_execution_is_failed_audited_and_notified(team):
    stale = executing(team, "old", age=LIMIT + timedelta(minutes=1))
    fresh = executing(team, "new", age=timedelta(seconds=5))

    assert fail_interrupted_applications() == [stale.pk]

    stale.refresh_from_db()
    assert stale.status == Status.FAILED
    assert "interrupted" in stale.error and "apply again" in stale.error
    assert Application.objects.get(pk=fresh.pk).status == Status.EXECUTING
    event = AuditEvent.objects.get(application=stale, action="interrupted")
    assert event.actor is None and event.team == team and event.detail["error"] == stale.error
    (notice,) = Notification.objects.filter(application=stale)
    assert notice.user == stale.applicant and "failed" in notice.message
    assert [m.to for m in mail.outbox] == [[stale.applicant.email]]
    # the target is free again: a new application for it may be filed
    assert not Application.objects.filter(target=stale.target, status__in=["pending", "executing"])
    assert fail_interrupted_applications() == []  # nothing twice


def test_a_live_executor_holding_the_row_is_left_alone(team):
    app = executing(team, "busy", age=LIMIT * 2)
    locked, release = threading.Event(), threading.Event()

    def executor() -> None:  # what approve() does while a kind executes
        try:
            with transaction.atomic():
                Application.objects.select_for_update().get(pk=app.pk)
                locked.set()
                release.wait(10)
        finally:
            connection.close()

    thread = threading.Thread(target=executor)
    thread.start()
    try:
        assert locked.wait(10)
        assert services.fail_interrupted(LIMIT, lambda task_id: False) == []
    finally:
        release.set()
        thread.join()
    assert Application.objects.get(pk=app.pk).status == Status.EXECUTING
    assert [a.pk for a in services.fail_interrupted(LIMIT, lambda task_id: False)] == [app.pk]


def test_a_running_celery_task_keeps_its_application(team):
    running_id, dead_id = str(uuid.uuid4()), str(uuid.uuid4())
    celery_app.backend.store_result(running_id, {"done": 1, "total": 4}, "PROGRESS")
    running = executing(team, "running", age=LIMIT * 2, result={"task_id": running_id})
    dead = executing(team, "dead", age=LIMIT * 2, result={"task_id": dead_id})

    assert task_running(running_id) and not task_running(dead_id)  # dead: unknown to Celery
    assert fail_interrupted_applications() == [dead.pk]
    assert Application.objects.get(pk=running.pk).status == Status.EXECUTING
    dead.refresh_from_db()
    assert dead_id in dead.error
    assert (
        AuditEvent.objects.get(application=dead, action="interrupted").detail["task_id"] == dead_id
    )

    celery_app.backend.store_result(running_id, {"done": 4, "total": 4}, "SUCCESS")
    assert fail_interrupted_applications() == [running.pk]


def test_beat_runs_the_sweep_every_minute():
    (entry,) = [
        e
        for e in settings.CELERY_BEAT_SCHEDULE.values()
        if e["task"] == "mqcloud.tasks.fail_interrupted_applications"
    ]
    assert entry["schedule"] == timedelta(minutes=1)
    assert "mqcloud.tasks.fail_interrupted_applications" in celery_app.tasks
