"""The admin index page (zbus.md §11.3), rendered with Django's templates.

The table is filled on the server with real numbers; a little inline script refreshes it
from the ``data`` JSON every few seconds (carrying the admin token the page was opened
with, if any).
"""

from __future__ import annotations

import datetime
from typing import Any

from django.template.loader import render_to_string

from brokers.servers.zbus.data import mode_label

TEMPLATE = "zbus/index.html"


def _time(ms: int) -> str:
    if not ms:
        return ""
    return datetime.datetime.fromtimestamp(ms / 1000).strftime("%Y-%m-%d %H:%M:%S")


def render_index(data: dict[str, Any], token: str | None) -> str:
    """The HTML of the index page for one broker's ``data``."""
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
            "rows": rows,
            "token": token or "",
        },
    )
