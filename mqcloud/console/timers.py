"""A topic's delayed and timer messages still held: listed soonest due first, searched by
due time or by id (the delay id, or the ``msgId`` HTTP-MQ gave the producer), and
selected for cancelling, which is an application (kind ``timer_cancel``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.http import urlencode
from django.views.decorators.http import require_POST

from brokers.engine import Engine, HeldMessage, client_name
from mqcloud.approvals.models import Kind
from mqcloud.console import access, engine_calls
from mqcloud.console.forms import UtcTimeField
from pipeline import ids
from proxy.httpmq.messages import delayed_message_id

PAGE = 50
MAX_PAGE = 200_000  # 10 million held messages; a ZRANGE offset beyond is not worth paging to


def delay_id_of(topic: str, text: str) -> int | None:
    """The delay id ``text`` names: the id itself, or the ``msgId`` HTTP-MQ gave the
    producer of a delayed or timer message of ``topic``; None for any other text."""
    text = text.strip()
    if text.isascii() and text.isdigit():
        value = int(text)
        return value if 0 < value < 2**63 else None
    if not text:
        return None
    return ids.parse(topic, text).delay_id


class TimerSearchForm(forms.Form):
    message_id = forms.CharField(
        max_length=200, required=False, label="Delay id or msgId", strip=True
    )
    due_from = UtcTimeField(required=False, label="Due from (UTC)")
    due_to = UtcTimeField(required=False, label="Due until (UTC)")

    def __init__(self, *args: Any, topic: str, **kwargs: Any) -> None:
        self.topic = topic
        super().__init__(*args, **kwargs)

    def clean_message_id(self) -> int | None:
        text = self.cleaned_data["message_id"]
        if not text:
            return None
        delay_id = delay_id_of(self.topic, text)
        if delay_id is None:
            raise forms.ValidationError(
                "Not the id of a delayed message: give its delay id or the msgId its producer got."
            )
        return delay_id

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        since, until = data.get("due_from"), data.get("due_to")
        if since is not None and until is not None and until < since:
            self.add_error("due_to", "Must not be before the start.")
        return data


@dataclass(frozen=True)
class TimerRow:
    """One held message as the list shows it."""

    delay_id: int
    message_id: str
    due: str
    app: str
    partition: int | None
    business_id: str
    properties: dict[str, str]
    body_preview: str


def _row(topic: str, m: HeldMessage) -> TimerRow:
    held = m.held
    properties = {
        name: value
        for stored, value in (held.attributes or {}).items()
        if (name := client_name(stored)) is not None
    }
    return TimerRow(
        delay_id=m.delay_id,
        message_id=delayed_message_id(topic, m.delay_id),
        due=engine_calls.fmt_ms(m.due_ms),
        app=held.app,
        partition=held.partition if held.partition is not None and held.partition >= 0 else None,
        business_id=held.business_id,
        properties=properties,
        body_preview=engine_calls.preview(held.body)[0],
    )


def held_page(
    topic: str, data: dict[str, Any], offset: int, limit: int
) -> tuple[int, list[TimerRow]]:
    """(how many match, one page of rows) of ``topic``'s held messages for a valid
    :class:`TimerSearchForm`'s data — one held message when it names an id."""

    async def call(engine: Engine) -> tuple[int, list[HeldMessage]]:
        wanted = data.get("message_id")
        if wanted is None:
            return await engine.delayed_messages(
                topic,
                offset=offset,
                limit=limit,
                due_from_ms=data.get("due_from"),
                due_to_ms=data.get("due_to"),
            )
        found = await engine.delayed_message(topic, wanted)
        return (0, []) if found is None else (1, [found])

    total, rows = engine_calls.run(call)
    return total, [_row(topic, m) for m in rows]


@login_required
def timer_list(request: HttpRequest, code: str) -> HttpResponse:
    """The held delayed and timer messages of a topic, with a cancel action for its team."""
    topic = access.get_topic(request.user, code)
    form = TimerSearchForm(request.GET or None, topic=topic.code)
    page = request.GET.get("page", "0")
    page = min(int(page), MAX_PAGE) if page.isascii() and page.isdigit() else 0
    rows: list[TimerRow] = []
    total, error = 0, ""
    if not form.is_bound or form.is_valid():
        data = form.cleaned_data if form.is_bound else {}
        try:
            total, rows = held_page(topic.code, data, page * PAGE, PAGE)
        except engine_calls.EngineUnavailable as exc:
            error = str(exc)
    query = request.GET.copy()
    query["page"] = str(page + 1)
    return render(
        request,
        "console/timers.html",
        {
            "topic": topic,
            "form": form,
            "rows": rows,
            "total": total,
            "error": error,
            "next_query": query.urlencode() if (page + 1) * PAGE < total else "",
        },
    )


@login_required
@require_POST
def timer_cancel(request: HttpRequest, code: str) -> HttpResponse:
    """The selected held messages to the cancel application's form (it is filed there)."""
    topic = access.get_topic(request.user, code)
    selected = request.POST.getlist("ids")
    if not selected or any(not (i.isascii() and i.isdigit()) for i in selected):
        messages.error(request, "Select at least one message.")
        return redirect("console:timers", topic.code)
    query = urlencode({"kind": Kind.TIMER_CANCEL, "topic": topic.code, "ids": ",".join(selected)})
    return redirect(f"{reverse('console:application-new')}?{query}")
