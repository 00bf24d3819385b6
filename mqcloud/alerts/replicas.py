"""Replica-lag alerts (the reference console's "replica falling behind by more than
10 MiB"), for the platform admins: a replica of the store more than
``REPLICA_LAG_ALERT_BYTES`` of the replication stream behind its master, or not online
(still syncing, or reconnecting) — what a failover now would lose, and what a produce at
QoS REPLICATED waits for. Checked every minute on every master
(:meth:`brokers.engine.Engine.replica_lags`); an alert key (one per replica) fires at
most once per ALERT_THROTTLE_SECONDS. ``REPLICA_LAG_ALERT_BYTES`` at 0 turns it off.
"""

from __future__ import annotations

from django.conf import settings

from brokers.engine import ReplicaLag
from mqcloud.alerts.delivery import AdminAlert, fire_admin_alerts
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
    return fire_admin_alerts(
        [
            AdminAlert(
                AlertEvent.Kind.REPLICA_LAG,
                f"replica:{lag.replica}",
                f"Store replica {lag.replica} of {lag.master} {why}",
                {
                    "master": lag.master,
                    "replica": lag.replica,
                    "state": lag.state,
                    "lag_bytes": lag.lag_bytes,
                },
                f"replica-lag:{lag.replica}",
            )
            for lag in lags
            if (why := behind(lag))
        ]
    )
