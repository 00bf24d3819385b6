"""Store-slow alerts (the reference console's "broker store slow"), for the platform
admins: a broker or HTTP-MQ process whose store writes — appends over every protocol,
as the engine timed them (:mod:`brokers.engine.latency`) — took more than
``STORE_SLOW_MAX_MS`` (500 ms) at most, or ``STORE_SLOW_P99_MS`` (400 ms) at the 99th
percentile, in the last minute. Read every minute from the reports the processes renew;
an alert key (one per process) fires at most once per ALERT_THROTTLE_SECONDS. Either
threshold at 0 is off.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings

from brokers.engine import AnyRedis, read_reports
from mqcloud.alerts.delivery import AdminAlert, fire_admin_alerts
from mqcloud.alerts.models import AlertEvent
from mqcloud.engine_access import run_on_store
from proxy.httpmq.report import BOARD as PROXY_BOARD


async def _reports(client: AnyRedis) -> dict[str, dict[str, Any]]:
    brokers = await read_reports(client)
    proxies = await read_reports(client, board=PROXY_BOARD)
    return {**brokers, **{f"httpmq:{name}": doc for name, doc in proxies.items()}}


def slow(writes: object) -> str | None:
    """Why ``writes`` (a report's ``store_writes``) are too slow, or None."""
    if not isinstance(writes, dict) or not writes.get("count"):
        return None
    top, p99 = float(writes.get("max_ms", 0)), float(writes.get("p99_ms", 0))
    reasons = []
    if settings.STORE_SLOW_MAX_MS and top > settings.STORE_SLOW_MAX_MS:
        reasons.append(f"max {top:,.0f} ms > {settings.STORE_SLOW_MAX_MS} ms")
    if settings.STORE_SLOW_P99_MS and p99 > settings.STORE_SLOW_P99_MS:
        reasons.append(f"p99 {p99:,.0f} ms > {settings.STORE_SLOW_P99_MS} ms")
    return ", ".join(reasons) or None


def check_store_latency() -> list[AlertEvent]:
    """Alert the platform admins of every reporting process whose store writes were slow
    in the last minute (each at most once per throttle window)."""
    return fire_admin_alerts(
        [
            AdminAlert(
                AlertEvent.Kind.STORE_SLOW,
                f"store:{name}",
                f"Store writes of {name} (pid {doc.get('pid', '?')}) were slow in the last "
                f"minute: {why}, over {doc['store_writes']['count']:,} writes",
                {"process": name, "pid": doc.get("pid"), "store_writes": doc["store_writes"]},
                f"store-slow:{name}",
            )
            for name, doc in sorted(run_on_store(_reports).items())
            if (why := slow(doc.get("store_writes")))
        ]
    )
