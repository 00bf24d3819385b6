"""Process alerts, for the platform admins: a process that died and was started again
(a broker worker, an HTTP-MQ serving process: the service went on, so nothing else tells
anyone), and an HTTP-MQ proxy process that stopped reporting (killed with its
supervisor, its host gone, or frozen): what the reference console calls "proxy down".

Every minute the check takes the exits the supervisors recorded
(:func:`brokers.engine.take_exits`) and the lapsed reports of the ``httpmq`` board
(:func:`brokers.engine.take_lapsed_reports`); each is taken once, so each alerts once —
exits one alert per process and check, at most once per throttle window.
A proxy process whose report lapsed and that comes back publishes a new one and shows
in the console again.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import redis
from asgiref.sync import async_to_sync
from django.conf import settings

from brokers.engine import engine_client, take_exits, take_lapsed_reports
from mqcloud.alerts.delivery import alert_admins, first_in_window, platform_admin_emails
from mqcloud.alerts.models import AlertEvent

PROXY_BOARD = "httpmq"
"""The board HTTP-MQ serving processes report on (:mod:`proxy.httpmq.report`)."""


def _when(seconds: object) -> str:
    if not isinstance(seconds, int | float):
        return "an unknown time"
    try:
        return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="seconds")
    except (ValueError, OverflowError, OSError):
        return "an unknown time"


async def _take() -> tuple[list[dict[str, Any]], dict[str, dict]]:
    client = engine_client(settings.REDIS_URL, socket_timeout=5, socket_connect_timeout=5)
    try:
        return await take_exits(client), await take_lapsed_reports(client, board=PROXY_BOARD)
    finally:
        await client.aclose()


def check_processes() -> list[AlertEvent]:
    """Alert the platform admins of the processes that died since the last check (one
    alert per process, with how often; at most once per ALERT_THROTTLE_SECONDS each, so a
    process dying in a loop does not flood them) and of every lapsed proxy report."""
    exits, lapsed = async_to_sync(_take)()
    fired: list[AlertEvent] = []
    if not exits and not lapsed:
        return fired
    recipients = platform_admin_emails()
    by_process: dict[str, list[dict[str, Any]]] = {}
    for doc in exits:
        key = f"{doc.get('service', '?')}/{doc.get('process', '?')}"
        by_process.setdefault(key, []).append(doc)
    client = redis.Redis.from_url(settings.REDIS_URL)
    try:
        for key, docs in by_process.items():
            if not first_in_window(client, f"process-exit:{key}"):
                continue
            last = docs[-1]
            times = f" (and {len(docs) - 1} more times since the last check)" if docs[1:] else ""
            message = (
                f"{last.get('service', '?')}: process {last.get('process', '?')} (pid"
                f" {last.get('pid', '?')}) {last.get('how', 'ended')} at"
                f" {_when(last.get('at'))}{times}; it was started again"
            )
            detail = {**last, "exits": len(docs)}
            fired.append(
                alert_admins(
                    AlertEvent.Kind.PROCESS_EXIT, f"process:{key}", message, detail, recipients
                )
            )
    finally:
        client.close()
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
