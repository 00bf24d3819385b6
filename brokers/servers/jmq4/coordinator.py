"""Coordinator (spec §6.6): which broker coordinates an app.

The coordinator of an app is ``abs(javaHash(app)) % n`` over the live brokers sorted by id,
so every broker process computes the same answer from the same catalog snapshot. The
partition groups it hands out are shared among the members (client IPs) by the engine
(:meth:`brokers.engine.Engine.assign_groups`): a member keeps its groups until
``sessionTimeout + 60000`` ms after its last FETCH_ASSIGNED_PARTITION.
"""

from __future__ import annotations

from brokers.engine import BrokerInfo, CatalogSnapshot, java_hash


def live_brokers(snapshot: CatalogSnapshot) -> list[BrokerInfo]:
    """Brokers that are alive, sorted by id."""
    return sorted((b for b in snapshot.brokers.values() if b.alive), key=lambda b: b.id)


def coordinator_for(snapshot: CatalogSnapshot, app: str) -> BrokerInfo | None:
    """The coordinator broker of ``app``, or None when no broker is alive."""
    brokers = live_brokers(snapshot)
    if not brokers:
        return None
    return brokers[abs(java_hash(app)) % len(brokers)]
