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

from brokers.engine import AnyRedis, take_exits, take_lapsed_reports
from mqcloud.alerts.delivery import AdminAlert, fire_admin_alerts
from mqcloud.alerts.models import AlertEvent
from mqcloud.engine_access import run_on_store
from proxy.httpmq.report import BOARD as PROXY_BOARD


def _when(seconds: object) -> str:
    if not isinstance(seconds, int | float):
        return "an unknown time"
    try:
        return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="seconds")
    except (ValueError, OverflowError, OSError):
        return "an unknown time"


async def _take(client: AnyRedis) -> tuple[list[dict[str, Any]], dict[str, dict]]:
    return await take_exits(client), await take_lapsed_reports(client, board=PROXY_BOARD)


def check_processes() -> list[AlertEvent]:
    """Alert the platform admins of the processes that died since the last check (one
    alert per process, with how often; at most once per ALERT_THROTTLE_SECONDS each, so a
    process dying in a loop does not flood them) and of every lapsed proxy report."""
    exits, lapsed = run_on_store(_take)
    by_process: dict[str, list[dict[str, Any]]] = {}
    for doc in exits:
        key = f"{doc.get('service', '?')}/{doc.get('process', '?')}"
        by_process.setdefault(key, []).append(doc)
    alerts = [_exit_alert(key, docs) for key, docs in by_process.items()]
    alerts += [
        AdminAlert(
            AlertEvent.Kind.PROXY_DOWN,
            f"httpmq:{name}",
            f"HTTP-MQ proxy process {name} (pid {doc.get('pid', '?')}) stopped reporting:"
            f" down, its host gone, or frozen (up since {_when(doc.get('since'))})",
            {"name": name, **doc},
        )
        for name, doc in sorted(lapsed.items())
    ]
    return fire_admin_alerts(alerts)


def _exit_alert(key: str, docs: list[dict[str, Any]]) -> AdminAlert:
    """The alert of process ``key``'s exits since the last check (the last one told)."""
    last = docs[-1]
    times = f" (and {len(docs) - 1} more times since the last check)" if docs[1:] else ""
    return AdminAlert(
        AlertEvent.Kind.PROCESS_EXIT,
        f"process:{key}",
        f"{last.get('service', '?')}: process {last.get('process', '?')} (pid"
        f" {last.get('pid', '?')}) {last.get('how', 'ended')} at"
        f" {_when(last.get('at'))}{times}; it was started again",
        {**last, "exits": len(docs)},
        f"process-exit:{key}",
    )
