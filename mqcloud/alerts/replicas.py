"""Replica-lag alerts (the reference console's "replica falling behind by more than
10 MiB"), for the platform admins: a replica of the store more than
``REPLICA_LAG_ALERT_BYTES`` of the replication stream behind its master, or not online
(still syncing, or reconnecting) — what a failover now would lose, and what a produce at
QoS REPLICATED waits for. Checked every minute on every master
(:meth:`brokers.engine.Engine.replica_lags`); an alert key (one per replica) fires at
most once per ALERT_THROTTLE_SECONDS. ``REPLICA_LAG_ALERT_BYTES`` at 0 turns it off.
"""

from __future__ import annotations

import redis
from django.conf import settings

from brokers.engine import ReplicaLag
from mqcloud.alerts.delivery import alert_admins, first_in_window, platform_admin_emails
from mqcloud.alerts.models import AlertEvent
from mqcloud.engine_access import run_in_session


def behind(lag: ReplicaLag) -> str | None:
    """What is wrong with ``lag``'s replica, or None."""
    if lag.state != "online":
        return f"is {lag.state}, not online"
    if lag.lag_bytes > settings.REPLICA_LAG_ALERT_BYTES:
        return f"is {lag.lag_bytes:,} bytes behind (over {settings.REPLICA_LAG_ALERT_BYTES:,})"
    return None


def check_replica_lag() -> list[AlertEvent]:
    """Alert the platform admins of every replica too far behind or not online."""
    if not settings.REPLICA_LAG_ALERT_BYTES:
        return []
    lags = run_in_session(lambda engine: engine.replica_lags())
    found = [(lag, why) for lag in lags if (why := behind(lag))]
    if not found:
        return []
    fired: list[AlertEvent] = []
    recipients = platform_admin_emails()
    client = redis.Redis.from_url(settings.REDIS_URL)
    try:
        for lag, why in found:
            if not first_in_window(client, f"replica-lag:{lag.replica}"):
                continue
            message = f"Store replica {lag.replica} of {lag.master} {why}"
            detail = {
                "master": lag.master,
                "replica": lag.replica,
                "state": lag.state,
                "lag_bytes": lag.lag_bytes,
            }
            fired.append(
                alert_admins(
                    AlertEvent.Kind.REPLICA_LAG,
                    f"replica:{lag.replica}",
                    message,
                    detail,
                    recipients,
                )
            )
    finally:
        client.close()
    return fired
