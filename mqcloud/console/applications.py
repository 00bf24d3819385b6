"""Application pages: request forms for every kind, "my applications", the admin queue
(approve, or reject with a reason), an application's page with its operation's progress
bar. Every action goes through :mod:`mqcloud.approvals.services`."""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import FileResponse, Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST
from rest_framework import serializers

from mqcloud.approvals import services
from mqcloud.approvals.models import Application, ApprovalSettings, Kind, Status
from mqcloud.console import access
from mqcloud.console.forms import FORMS, add_service_errors, error_text, initial_for
from mqcloud.console.listing import Filter, ListSpec, paginate
from mqcloud.console.topics import team_choices
from mqcloud.exports import download, export_file
from mqcloud.operations import progress as operation_progress

PAGE = 25
FILTERS = (
    Filter("status", "Status", lookup="status", choices=tuple(Status.choices)),
    Filter("kind", "Kind", lookup="kind", choices=tuple(Kind.choices)),
    Filter("team", "Team", lookup="team__name"),
)
SORTS = {
    "id": ["pk"],
    "created": ["created_at"],
    "kind": ["kind"],
    "status": ["status"],
    "target": ["target"],
    "team": ["team__name"],
}
APPLICATIONS = ListSpec(
    sorts=SORTS,
    default_sort="-created",
    search=("target", "applicant__username"),
    filters=FILTERS,
    per_page=PAGE,
    search_label="Search target or applicant",
)
QUEUE = ListSpec(
    sorts=SORTS,
    default_sort="created",
    search=("target", "applicant__username"),
    filters=FILTERS[1:],
    per_page=PAGE,
    search_label="Search target or applicant",
)


class RejectForm(forms.Form):
    reason = forms.CharField(max_length=2000, widget=forms.Textarea(attrs={"rows": 2}))


def _visible(user) -> object:
    rows = Application.objects.select_related("applicant", "decided_by", "team")
    return rows if access.is_platform_admin(user) else rows.filter(team__in=access.user_teams(user))


def _get(user, pk: int) -> Application:
    app = _visible(user).filter(pk=pk).first()
    if app is None:
        raise Http404("No such application.")
    return app


@login_required
def application_new(request: HttpRequest) -> HttpResponse:
    """Pick a kind, fill its form; errors (the form's and the service's) show inline."""
    kind = request.POST.get("kind") or request.GET.get("kind", "")
    form_class = FORMS.get(kind)
    if form_class is None:
        choices = [(k, FORMS[k].title) for k in FORMS]
        return render(request, "console/application_kinds.html", {"choices": choices})
    if request.method == "POST":
        form = form_class(request.POST, user=request.user)
        if form.is_valid():
            try:
                application = services.submit(request.user, kind, form.payload())
            except serializers.ValidationError as exc:
                add_service_errors(form, exc.detail)
            else:
                if application.status == Status.PENDING:
                    messages.success(request, f"Application #{application.pk} waits for an admin.")
                return redirect("console:application", pk=application.pk)
    else:
        initial = initial_for(kind, request.user, request.GET.dict())
        form = form_class(user=request.user, initial=initial)
    return render(request, "console/application_form.html", {"form": form, "kind": kind})


@login_required
def application_list(request: HttpRequest) -> HttpResponse:
    """The user's own applications ("mine", default) or their teams' ("team"): searched,
    filtered, sorted and paged on the server."""
    scope = "team" if request.GET.get("scope") == "team" else "mine"
    rows = _visible(request.user)
    if scope == "mine":
        rows = rows.filter(applicant=request.user)
    listing = paginate(request, rows, APPLICATIONS, choices={"team": team_choices(request.user)})
    return render(request, "console/applications.html", {"listing": listing, "scope": scope})


@login_required
def application_queue(request: HttpRequest) -> HttpResponse:
    """Pending applications, oldest first (paged, searchable), for platform admins to
    decide."""
    access.require_platform_admin(request.user)
    pending = Application.objects.filter(status=Status.PENDING).select_related("applicant", "team")
    listing = paginate(request, pending, QUEUE, choices={"team": team_choices(request.user)})
    return render(
        request,
        "console/application_queue.html",
        {
            "listing": listing,
            "settings": ApprovalSettings.current(),
            "reject_form": RejectForm(),
        },
    )


@login_required
def application_detail(request: HttpRequest, pk: int) -> HttpResponse:
    application = _get(request.user, pk)
    return render(
        request,
        "console/application_detail.html",
        {
            "application": application,
            "events": application.events.select_related("actor"),
            "is_admin": access.is_platform_admin(request.user),
            "reject_form": RejectForm(),
            "progress": _progress(application),
            "frozen": ApprovalSettings.current().frozen,
            "export_ready": export_file(application) is not None,
        },
    )


def _progress(application: Application) -> dict | None:
    """The operation's progress (offset reset, skip backlog) with a percentage, or None."""
    task_id = application.result.get("task_id") if isinstance(application.result, dict) else None
    if not task_id:
        return None
    info = operation_progress(task_id)
    total, done = info.get("total") or 0, info.get("done") or 0
    state = info["state"]
    percent = 100 if state == "SUCCESS" else (done * 100 // total if total else 0)
    return {**info, "percent": percent, "finished": state in ("SUCCESS", "FAILURE", "REVOKED")}


@login_required
def application_export(request: HttpRequest, pk: int) -> FileResponse:
    """The file an approved message export wrote, to the topic's team and platform
    admins; 404 while it is being written and once it was removed."""
    application = _get(request.user, pk)
    response = download(application)
    if response is None:
        raise Http404("No export file: not written yet, or removed (kept for a week).")
    return response


@login_required
def application_progress(request: HttpRequest, pk: int) -> HttpResponse:
    """The progress bar alone, polled by htmx until the operation finishes."""
    application = _get(request.user, pk)
    progress = _progress(application)
    if progress is None:
        raise Http404("This application started no long operation.")
    return render(
        request,
        "console/partials/progress.html",
        {"application": application, "progress": progress},
    )


def _decide(request: HttpRequest, pk: int, decide) -> HttpResponse:
    application = _get(request.user, pk)
    try:
        decide(application)
    except services.WorkflowError as exc:
        messages.error(request, str(exc))
    except serializers.ValidationError as exc:
        messages.error(request, error_text(exc.detail))
    back = request.POST.get("next", "")
    if back == "queue":
        return redirect("console:application-queue")
    return redirect(reverse("console:application", args=[application.pk]))


@login_required
@require_POST
def application_approve(request: HttpRequest, pk: int) -> HttpResponse:
    access.require_platform_admin(request.user)

    def decide(app: Application) -> None:
        done = services.approve(app, request.user)
        if done.status == Status.FAILED:
            messages.error(request, f"Application #{done.pk} failed: {done.error}")
        else:
            messages.success(request, f"Application #{done.pk} approved.")

    return _decide(request, pk, decide)


@login_required
@require_POST
def application_reject(request: HttpRequest, pk: int) -> HttpResponse:
    access.require_platform_admin(request.user)
    form = RejectForm(request.POST)
    if not form.is_valid():
        application = _get(request.user, pk)
        return render(
            request,
            "console/application_detail.html",
            {
                "application": application,
                "events": application.events.select_related("actor"),
                "is_admin": True,
                "reject_form": form,
                "progress": _progress(application),
                "frozen": ApprovalSettings.current().frozen,
            },
            status=400,
        )

    def decide(app: Application) -> None:
        services.reject(app, request.user, form.cleaned_data["reason"])
        messages.success(request, f"Application #{app.pk} rejected.")

    return _decide(request, pk, decide)


@login_required
@require_POST
def application_cancel(request: HttpRequest, pk: int) -> HttpResponse:
    def decide(app: Application) -> None:
        services.cancel(app, request.user)
        messages.success(request, f"Application #{app.pk} cancelled.")

    return _decide(request, pk, decide)
