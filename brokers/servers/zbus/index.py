"""The admin index page (zbus.md §11.3), rendered with Django's templates.

The table is filled on the server with real numbers; a little inline script refreshes it
from the ``data`` JSON every few seconds (carrying the admin token the page was opened
with, if any).

A broker may serve thousands of MQs, so the page shows one page of them at a time:
``?q=`` keeps the names containing a text, ``?page=`` picks the page (PAGE_SIZE names, in
name order), and only the shown MQs are measured. The ``data`` JSON takes the same two
parameters (without them it answers every MQ, as §11.2 says).
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from django.template.loader import render_to_string

from brokers.servers.zbus.data import mode_label

TEMPLATE = "zbus/index.html"
PAGE_SIZE = 100
MAX_QUERY = 200


@dataclass(frozen=True)
class Paging:
    """One page of MQ names: which, how many match in all, where the pages go."""

    names: list[str]
    q: str
    page: int
    pages: int
    total: int

    def link(self, page: int, token: str | None) -> str:
        params = {"q": self.q, "page": page, "token": token}
        query = urlencode({k: v for k, v in params.items() if v not in (None, "", 1)})
        return f"/?{query}" if query else "/"


def wants_page(headers: Mapping[str, str]) -> bool:
    """Whether a ``data`` request asks for one page (``q`` or ``page`` given)."""
    return "q" in headers or "page" in headers


def select(names: Sequence[str], headers: Mapping[str, str]) -> Paging:
    """The page of ``names`` that ``q`` and ``page`` ask for; a ``page`` that is not a
    number counts as 1, one past the end as the last page."""
    q = headers.get("q", "").replace("\x00", "").strip()[:MAX_QUERY]
    matching = [n for n in names if q.lower() in n.lower()] if q else list(names)
    pages = max(1, -(-len(matching) // PAGE_SIZE))
    raw = headers.get("page", "1").strip()[:12]
    page = min(max(int(raw), 1), pages) if raw.isascii() and raw.isdigit() else 1
    start = (page - 1) * PAGE_SIZE
    return Paging(matching[start : start + PAGE_SIZE], q, page, pages, len(matching))


def _time(ms: int) -> str:
    if not ms:
        return ""
    return datetime.datetime.fromtimestamp(ms / 1000).strftime("%Y-%m-%d %H:%M:%S")


def render_index(data: dict[str, Any], token: str | None, paging: Paging) -> str:
    """The HTML of the index page for one broker's ``data`` (one page of its MQs)."""
    rows = [
        {
            "name": info["name"],
            "type": mode_label(info["mode"]),
            "consumers": info["consumerCount"],
            "unconsumed": info["unconsumedMsgCount"],
            "in_flight": info.get("inFlightMsgCount", 0),
            "created": _time(info["createdTime"]),
            "creator": info["creator"],
        }
        for info in data["mqTable"].values()
    ]
    return render_to_string(
        TEMPLATE,
        {
            "broker": data["broker"],
            "generated": _time(data["lastUpdatedTime"]),
            "rows": sorted(rows, key=lambda r: r["name"]),
            "token": token or "",
            "paging": paging,
            "previous": paging.link(paging.page - 1, token) if paging.page > 1 else "",
            "next": paging.link(paging.page + 1, token) if paging.page < paging.pages else "",
        },
    )
