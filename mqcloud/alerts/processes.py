"""Process alerts, for the platform admins: a process that died and was started again
(a broker worker, an HTTP-MQ serving process: the service went on, so nothing else tells
anyone), and an HTTP-MQ proxy process that stopped reporting (killed with its
supervisor, its host gone, or frozen): what the reference console calls "proxy down".

Every minute the check takes the exits the supervisors recorded
(:func:`brokers.engine.take_exits`) and the lapsed reports of the ``httpmq`` board
(:func:`brokers.engine.take_lapsed_reports`); each is taken once, so each alerts once.
A proxy process whose report lapsed and that comes back publishes a new one and shows
in the console again.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from asgiref.sync import async_to_sync
from django.conf import settings

from brokers.engine import engine_client, take_exits, take_lapsed_reports
from mqcloud.alerts.delivery import alert_admins, platform_admin_emails
from mqcloud.alerts.models import AlertEvent

PROXY_BOARD = "httpmq"
"""The board HTTP-MQ serving processes report on (:mod:`proxy.httpmq.report`)."""


def _when(seconds: object) -> str:
    if not isinstance(seconds, int | float):
        return "an unknown time"
    return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="seconds")


async def _take() -> tuple[list[dict[str, Any]], dict[str, dict]]:
    client = engine_client(settings.REDIS_URL, socket_timeout=5, socket_connect_timeout=5)
    try:
        return await take_exits(client), await take_lapsed_reports(client, board=PROXY_BOARD)
    finally:
        await client.aclose()


def check_processes() -> list[AlertEvent]:
    """Alert the platform admins of every recorded process exit and lapsed proxy report."""
    exits, lapsed = async_to_sync(_take)()
    fired: list[AlertEvent] = []
    recipients = platform_admin_emails() if exits or lapsed else []
    for doc in exits:
        service, process = str(doc.get("service", "?")), doc.get("process", "?")
        message = (
            f"{service}: process {process} (pid {doc.get('pid', '?')}) "
            f"{doc.get('how', 'ended')} at {_when(doc.get('at'))}; it was started again"
        )
        target = f"process:{service}/{process}"
        fired.append(alert_admins(AlertEvent.Kind.PROCESS_EXIT, target, message, doc, recipients))
    for name, doc in sorted(lapsed.items()):
        message = (
            f"HTTP-MQ proxy process {name} (pid {doc.get('pid', '?')}) stopped reporting:"
            f" down, its host gone, or frozen (up since {_when(doc.get('since'))})"
        )
        detail = {"name": name, **doc}
        fired.append(
            alert_admins(AlertEvent.Kind.PROXY_DOWN, f"httpmq:{name}", message, detail, recipients)
        )
    return fired
