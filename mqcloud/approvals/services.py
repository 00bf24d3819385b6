"""The application workflow: submit, approve (execute), reject, cancel — all audited —
and the sweep that fails executions interrupted by a dying process.

Decisions lock the application row, so two admins approving at once execute it once.
Execution runs in its own transaction: a failure leaves the catalog untouched and the
application marked failed with the error, visible to the applicant.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import timedelta

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.core.mail import send_mail
from django.db import IntegrityError, transaction
from django.utils import timezone
from rest_framework import serializers

from brokers.models import Team
from mqcloud.api.scoping import is_platform_admin
from mqcloud.approvals import kinds
from mqcloud.approvals.models import (
    NEVER_AUTO_APPROVED,
    Application,
    ApprovalSettings,
    AuditEvent,
    Notification,
    Status,
)
from mqcloud.approvals.secrets import redacted

log = logging.getLogger(__name__)


class WorkflowError(Exception):
    """An action that the application's state or the caller's role does not allow."""


def record(
    actor: AbstractBaseUser | None,
    action: str,
    target: str,
    *,
    team: Team | None = None,
    application: Application | None = None,
    detail: dict | None = None,
) -> AuditEvent:
    """Append a line to the audit trail."""
    return AuditEvent.objects.create(
        actor=actor if getattr(actor, "is_authenticated", False) else None,
        action=action,
        target=target,
        team=team,
        application=application,
        detail=detail or {},
    )


def notify(application: Application, message: str) -> None:
    """Tell the applicant in the console and by e-mail (after the transaction commits)."""
    Notification.objects.create(
        user=application.applicant, application=application, message=message
    )
    email = application.applicant.email

    def send() -> None:
        if not email:
            return
        try:
            send_mail(f"[mqcloud] {message}", message, settings.DEFAULT_FROM_EMAIL, [email])
        except Exception:  # the in-console notice stands; a mail outage must not undo work
            log.exception("could not e-mail %s about application %s", email, application.pk)

    transaction.on_commit(send)


def submit(user: AbstractBaseUser, kind: str, payload: object) -> Application:
    """File an application; auto-approves it when its kind is configured so."""
    prepared = kinds.prepare(kind, user, payload)
    try:
        with transaction.atomic():
            application = Application.objects.create(
                kind=kind,
                applicant=user,
                team=prepared.team,
                payload=prepared.payload,
                target=prepared.target,
            )
            record(
                user,
                "submitted",
                prepared.target,
                team=prepared.team,
                application=application,
                detail={"kind": kind, "payload": redacted(prepared.payload)},
            )
    except IntegrityError:
        raise serializers.ValidationError(
            {"target": f"{prepared.target} already has an open application; wait for it."}
        ) from None
    approval = ApprovalSettings.current()
    if kind in approval.auto_approve and kind not in NEVER_AUTO_APPROVED and not approval.frozen:
        return approve(application, None)
    return application


def approve(application: Application, admin: AbstractBaseUser | None) -> Application:
    """Approve and execute ``application`` (``admin`` None means auto-approval)."""
    if admin is not None and not is_platform_admin(admin):
        raise WorkflowError("Only platform admins approve applications.")
    if admin is not None and ApprovalSettings.current().frozen:
        raise WorkflowError("Approvals are frozen for maintenance.")
    with transaction.atomic():
        app = Application.objects.select_for_update().get(pk=application.pk)
        if app.status != Status.PENDING:
            raise WorkflowError(f"Application #{app.pk} is {app.get_status_display().lower()}.")
        app.status = Status.EXECUTING
        app.decided_by, app.decided_at = admin, timezone.now()
        app.auto_approved = admin is None
        app.save()
        record(
            admin,
            "auto-approved" if admin is None else "approved",
            app.target,
            team=app.team,
            application=app,
        )
    try:
        with transaction.atomic():
            # The row stays locked while it executes: the interrupted-execution sweep skips
            # locked rows, so it only ever fails an application whose executor is gone.
            Application.objects.select_for_update().get(pk=app.pk)
            result = kinds.prepare(app.kind, app.applicant, app.payload).execute()
            app.status, app.result, app.error = Status.APPROVED, result, ""
            app.save()
            record(admin, "executed", app.target, team=app.team, application=app, detail=result)
            notify(app, f"Application #{app.pk} ({app.get_kind_display()}) was approved.")
    except serializers.ValidationError as exc:
        _failed(app, admin, _flatten(exc.detail))
    except Exception as exc:
        log.exception("application %s failed", app.pk)
        _failed(app, admin, f"{type(exc).__name__}: {exc}")
    return app


def _failed(app: Application, admin: AbstractBaseUser | None, error: str) -> None:
    with transaction.atomic():
        current = Application.objects.select_for_update().get(pk=app.pk)
        if current.status != Status.EXECUTING:  # the interrupted sweep got there first
            app.status, app.error = current.status, current.error
            return
        app.status, app.error = Status.FAILED, error
        app.save()
        record(admin, "failed", app.target, team=app.team, application=app, detail={"error": error})
        notify(app, f"Application #{app.pk} ({app.get_kind_display()}) failed: {error}")


def reject(application: Application, admin: AbstractBaseUser, reason: str) -> Application:
    """Reject with a reason (required)."""
    if not is_platform_admin(admin):
        raise WorkflowError("Only platform admins reject applications.")
    if not reason or not reason.strip():
        raise serializers.ValidationError({"reason": "Say why the application is rejected."})
    with transaction.atomic():
        app = Application.objects.select_for_update().get(pk=application.pk)
        if app.status != Status.PENDING:
            raise WorkflowError(f"Application #{app.pk} is {app.get_status_display().lower()}.")
        app.status, app.reason = Status.REJECTED, reason.strip()
        app.decided_by, app.decided_at = admin, timezone.now()
        app.save()
        record(
            admin,
            "rejected",
            app.target,
            team=app.team,
            application=app,
            detail={"reason": app.reason},
        )
        notify(app, f"Application #{app.pk} ({app.get_kind_display()}) was rejected: {app.reason}")
    return app


def cancel(application: Application, user: AbstractBaseUser) -> Application:
    """The applicant (or an admin) withdraws a pending application."""
    with transaction.atomic():
        app = Application.objects.select_for_update().get(pk=application.pk)
        if app.applicant_id != user.pk and not is_platform_admin(user):
            raise WorkflowError("Only the applicant or an admin may cancel it.")
        if app.status != Status.PENDING:
            raise WorkflowError(f"Application #{app.pk} is {app.get_status_display().lower()}.")
        app.status = Status.CANCELLED
        app.save()
        record(user, "cancelled", app.target, team=app.team, application=app)
    return app


def fail_interrupted(
    older_than: timedelta, task_running: Callable[[str], bool]
) -> list[Application]:
    """Mark failed the applications executing for longer than ``older_than`` whose executor
    is gone: no process holds the row (a live execution keeps it locked) and the Celery
    task they started, if any, is not running (``task_running(task_id)`` is false).
    Each is audited ("interrupted") and its applicant notified; returns them."""
    cutoff = timezone.now() - older_than
    failed: list[Application] = []
    stale = Application.objects.filter(status=Status.EXECUTING, updated_at__lt=cutoff)
    for pk in stale.values_list("pk", flat=True):
        with transaction.atomic():
            app = (
                Application.objects.select_for_update(skip_locked=True)
                .filter(pk=pk, status=Status.EXECUTING, updated_at__lt=cutoff)
                .select_related("applicant", "team")
                .first()
            )
            if app is None:  # executing right now, or finished meanwhile
                continue
            task_id = app.result.get("task_id") if isinstance(app.result, dict) else None
            if task_id and task_running(task_id):
                continue
            since = app.decided_at or app.updated_at
            error = (
                f"Execution was interrupted: it started at {since:%Y-%m-%d %H:%M:%S} UTC and"
                f" its process{' and task ' + task_id if task_id else ''} ended without a"
                " result. Check the target's state and apply again if the change is missing."
            )
            app.status, app.error = Status.FAILED, error
            app.save()
            record(
                None,
                "interrupted",
                app.target,
                team=app.team,
                application=app,
                detail={"error": error, "task_id": task_id or ""},
            )
            notify(app, f"Application #{app.pk} ({app.get_kind_display()}) failed: {error}")
            failed.append(app)
    return failed


def _flatten(detail: object) -> str:
    if isinstance(detail, dict):
        return "; ".join(f"{k}: {_flatten(v)}" for k, v in detail.items())
    if isinstance(detail, list):
        return " ".join(_flatten(v) for v in detail)
    return str(detail)
