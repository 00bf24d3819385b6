"""The message browser: a topic's messages by partition and index range, by message id
within a time window, or by time range (bounded scans, never a full-topic read)."""

from __future__ import annotations

import time
from typing import Any

from django import forms
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from brokers.models import Topic
from mqcloud.console import access, engine_calls
from mqcloud.console.forms import UtcTimeField
from pipeline import ids
from pipeline.ids import MessageId

MAX_ROWS = 200
DEFAULT_WINDOW_MS = 3_600_000


class BrowseForm(forms.Form):
    mode = forms.ChoiceField(
        choices=[
            ("index", "Partition and index range"),
            ("business", "Message id or businessId"),
            ("time", "Time range"),
        ],
        initial="index",
    )
    partition = forms.IntegerField(min_value=0, max_value=1023, required=False)
    start = forms.IntegerField(min_value=0, required=False, label="From index")
    count = forms.IntegerField(min_value=1, max_value=MAX_ROWS, initial=20, required=False)
    business_id = forms.CharField(max_length=200, required=False, label="Message id or businessId")
    since = UtcTimeField(required=False, label="From (UTC)")
    until = UtcTimeField(required=False, label="To (UTC)")

    def __init__(self, *args: Any, topic: Topic, **kwargs: Any) -> None:
        self.topic = topic
        super().__init__(*args, **kwargs)

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        mode = data.get("mode")
        p = data.get("partition")
        if p is not None and p >= self.topic.partitions:
            self.add_error("partition", f"The topic has partitions 0–{self.topic.partitions - 1}.")
        if mode == "index" and p is None:
            self.add_error("partition", "Choose a partition.")
        if mode == "business" and not data.get("business_id"):
            self.add_error("business_id", "Give the message id or businessId to look for.")
        since, until = data.get("since"), data.get("until")
        if since is not None and until is not None and until < since:
            self.add_error("until", "Must not be before the start.")
        return data


def _search(topic: Topic, data: dict[str, Any]) -> tuple[list, bool]:
    count = data.get("count") or 20
    if data["mode"] == "index":
        return engine_calls.read_range(
            topic.code, data["partition"], data.get("start") or 0, count
        ), False
    now = int(time.time() * 1000)
    message_id = ids.parse(topic.code, data["business_id"]) if data["mode"] == "business" else None
    until = data.get("until") or now
    since = data.get("since") if data.get("since") is not None else until - DEFAULT_WINDOW_MS
    result = search(topic, message_id, data.get("partition"), since, until, count)
    return result.rows, result.truncated


def search(
    topic: Topic,
    message_id: MessageId | None,
    partition: int | None,
    since: int,
    until: int,
    count: int,
) -> engine_calls.Scan:
    """Up to ``count`` records stored in ``[since, until]`` (those ``message_id`` names,
    when given) on ``partition``, or on every partition the id can be in — the browser's
    search and the API's."""
    if partition is not None:
        parts = [partition]
    elif message_id is not None:
        parts = engine_calls.id_partitions(topic.partitions, message_id)
    else:
        parts = list(range(topic.partitions))
    return engine_calls.scan(topic.code, parts, since, until, message_id=message_id, limit=count)


@login_required
def browse(request: HttpRequest, code: str) -> HttpResponse:
    topic = access.get_topic(request.user, code)
    form = BrowseForm(request.GET or None, topic=topic, initial={"mode": "index", "count": 20})
    rows: list = []
    truncated, error, searched = False, "", False
    if form.is_bound and form.is_valid():
        searched = True
        try:
            rows, truncated = _search(topic, form.cleaned_data)
        except (engine_calls.EngineUnavailable, engine_calls.PastTheEnd) as exc:
            error = str(exc)
    # htmx swaps the form with the results, so field errors show inline after a search too
    template = "console/partials/message_search.html" if request.htmx else "console/messages.html"
    return render(
        request,
        template,
        {
            "topic": topic,
            "form": form,
            "rows": rows,
            "truncated": truncated,
            "error": error,
            "searched": searched,
            "scan_limit": engine_calls.SCAN_LIMIT,
        },
    )
