"""Pipeline pages: the archive's progress per topic, each job's last run and recent
history, and archive searches.

An archive search never starts Spark in the web process: it is a :class:`TraceSearch`
row that a Celery task fills by running ``pipeline trace --json`` in a subprocess; the
page polls (htmx) until the rows are there. Searches are scoped like topics: a user
starts and sees searches only of topics they may see.
"""

from __future__ import annotations

import base64
import binascii
import codecs
import datetime as dt
from typing import Any

import redis
from django import forms
from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render

from brokers.engine import EngineError
from brokers.topic_codes import STORED_TOPIC_MAX
from mqcloud.console import access
from mqcloud.console.engine_calls import fmt_ms, preview
from mqcloud.console.forms import UtcTimeField
from mqcloud.console.listing import ListSpec, page_of
from pipeline import tasks
from pipeline.models import TRACE_LIMIT, JobRun, TraceSearch
from pipeline.status import TopicStatus, archive_status

HISTORY = 20
RUNS_POLL_S = 3
TRACE_POLL_S = 2
MAX_OPEN_SEARCHES = 3  # pending or running searches per user
OPEN = (TraceSearch.Status.PENDING, TraceSearch.Status.RUNNING)
ARCHIVE = ListSpec(
    sorts={"topic": []}, default_sort="topic", search=("topic",), per_page=25,
    search_label="Search archived topics",
)  # fmt: skip


def archive_topics(user: AbstractBaseUser) -> tuple[list[TopicStatus], str]:
    """The archive's progress per topic the user may see (archive on, or archived
    before), and an error when the store did not answer."""
    visible = set(access.topics_for(user).values_list("code", flat=True))
    try:
        statuses = archive_status(settings.REDIS_URL)
    except (redis.RedisError, OSError, EngineError) as exc:
        return [], f"The message store did not answer: {exc}"
    return [s for s in statuses if s.topic in visible], ""


def _job_runs() -> list[dict[str, Any]]:
    jobs = []
    for job, label in JobRun.Job.choices:
        history = list(JobRun.objects.filter(job=job)[:HISTORY])
        jobs.append(
            {"job": job, "label": label, "last": history[0] if history else None, "runs": history}
        )
    return jobs


@login_required
def jobs(request: HttpRequest) -> HttpResponse:
    """Every job's last run and its last runs; htmx polls the table while one is running.

    Run details name topics and businessIds, so only platform admins see them."""
    runs = _job_runs()
    running = any(r.status == JobRun.Status.RUNNING for j in runs for r in j["runs"])
    topics, store_error = archive_topics(request.user)
    archive = page_of(request, topics, ARCHIVE, text=lambda t: t.topic)
    template = "console/pipeline_runs.html" if request.htmx else "console/pipeline.html"
    return render(
        request,
        template,
        {
            "jobs": runs,
            "running": running,
            "poll_s": RUNS_POLL_S,
            "show_detail": access.is_platform_admin(request.user),
            "archive_topics": archive.rows,
            "archive": archive,
            "store_error": store_error,
        },
    )


class TraceForm(forms.Form):
    topic = forms.CharField(max_length=STORED_TOPIC_MAX)
    business_id = forms.CharField(
        max_length=200,
        label="Message id or businessId",
        help_text="Any id a client saw: businessId, partition:index, HTTP-MQ msgId, "
        "VibeMQ message id, zbus msgid.",
    )
    since = UtcTimeField(required=False, label="From (UTC)")
    until = UtcTimeField(required=False, label="To (UTC)")

    def __init__(self, *args: Any, user: AbstractBaseUser, **kwargs: Any) -> None:
        self.user = user
        super().__init__(*args, **kwargs)

    def clean_topic(self) -> str:
        code = self.cleaned_data["topic"]
        if not access.topics_for(self.user).filter(code=code).exists():
            raise forms.ValidationError("No such topic.")
        return code

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        since, until = data.get("since"), data.get("until")
        if since is not None and until is not None and until <= since:
            self.add_error("until", "Must be after the start.")
        open_searches = TraceSearch.objects.filter(requested_by=self.user, status__in=OPEN)
        if open_searches.count() >= MAX_OPEN_SEARCHES:
            raise forms.ValidationError(
                f"You have {MAX_OPEN_SEARCHES} archive searches under way; wait for one to finish."
            )
        return data


def _aware(ms: int | None) -> dt.datetime | None:
    return None if ms is None else dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC)


def _ms(when: dt.datetime | None) -> int:
    return 0 if when is None else int(when.timestamp() * 1000)


def start_search(user: AbstractBaseUser, data: dict[str, Any]) -> TraceSearch:
    """The open search with the same terms, or a new one queued for a worker."""
    terms = {
        "topic": data["topic"],
        "business_id": data["business_id"],
        "start": _aware(data.get("since")),
        "end": _aware(data.get("until")),
    }
    same = TraceSearch.objects.filter(status__in=OPEN, **terms).first()
    if same is not None:
        return same
    search = TraceSearch.objects.create(requested_by=user, **terms)
    transaction.on_commit(lambda: tasks.trace.delay(search.pk))
    return search


@login_required
def trace_new(request: HttpRequest) -> HttpResponse:
    """The archive search form (prefilled from the query string); the user's recent searches."""
    if request.method == "POST":
        form = TraceForm(request.POST, user=request.user)
        if form.is_valid():
            search = start_search(request.user, form.cleaned_data)
            return redirect("console:trace-result", pk=search.pk)
    else:
        fields = ("topic", "business_id", "since", "until")
        form = TraceForm(
            user=request.user, initial={k: request.GET[k] for k in fields if k in request.GET}
        )
    visible = access.topics_for(request.user).values("code")
    recent = TraceSearch.objects.filter(requested_by=request.user, topic__in=visible)[:10]
    return render(
        request,
        "console/pipeline_trace.html",
        {"form": form, "recent": recent, "limit": TRACE_LIMIT},
    )


def body_preview(body: bytes, cut: bool = False) -> tuple[str, bool]:
    """The body as text when it is printable UTF-8, else as hex; a body ``cut`` short may
    end inside a character, which is left out."""
    try:
        text = codecs.getincrementaldecoder("utf-8")().decode(body, final=not cut)
    except UnicodeDecodeError:
        text = None
    if text is None or not all(c.isprintable() or c in "\t\n\r" for c in text):
        return preview(body.hex(" ").encode())[0], False
    return preview(text.encode())[0], True


def _row(raw: dict[str, Any]) -> dict[str, Any]:
    try:
        body = base64.b64decode(raw.get("body_base64", ""), validate=True)
    except (binascii.Error, ValueError):
        body = b""
    text, is_text = body_preview(body, bool(raw.get("body_truncated")))
    return {
        **raw,
        "store_time": fmt_ms(raw.get("store_ms", 0)),
        "send_time": fmt_ms(raw.get("send_ms", 0)),
        "body_preview": text,
        "body_is_text": is_text,
    }


@login_required
def trace_result(request: HttpRequest, pk: int) -> HttpResponse:
    """A search and, once the worker stored them, its rows; htmx polls until it is done."""
    search = TraceSearch.objects.filter(pk=pk).first()
    if search is None:
        raise Http404("No such search.")
    topic = access.get_topic(request.user, search.topic)  # 404 for another team's topic
    template = (
        "console/pipeline_trace_result.html" if request.htmx else "console/pipeline_trace_page.html"
    )
    return render(
        request,
        template,
        {
            "search": search,
            "topic": topic,
            "start": fmt_ms(_ms(search.start)),
            "end": fmt_ms(_ms(search.end)),
            "rows": [_row(r) for r in search.rows] if search.done else [],
            "limit": TRACE_LIMIT,
            "poll_s": TRACE_POLL_S,
        },
    )
