"""Blocked-consumer alerts: a sequential consumer (its topic or its policy is
sequential) never skips a message it failed — it gets the same one again — so one
message it cannot handle stops its partition for good, and on a quiet topic the backlog
may never reach the backlog alert's count. Such a consumer alerts its team when, on a
partition with messages waiting, its ack index has not moved for CONSUMER_BLOCKED_ALERT_S
(60 by default; 0: off) while it kept fetching (its last access is that recent: a
consumer that stopped fetching is not blocked, it is down — the backlog alert's case).

Checked every 30 seconds for the consumers with their alerts on (``backlog_alert_enabled``,
the consumer's alert switch), their progress read in one round trip per 500 consumers.
Where each partition's ack index stood, and since when, is kept in one Redis hash between
checks; an alert key fires at most once per ALERT_THROTTLE_SECONDS, as the other alerts
do.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import redis
from django.conf import settings

from brokers.engine import PartitionProgress
from brokers.models import ConsumerPolicy, Topic
from mqcloud.alerts.delivery import alert_team, first_in_window
from mqcloud.alerts.models import AlertEvent
from mqcloud.alerts.watched import watched_consumers
from mqcloud.engine_access import run_in_session

SINCE = "mqcloud:alert:blocked-since"
"""Hash: ``<consumer>|<partition>`` → ``<ack index>:<ms>``, where the ack index of a
partition with messages waiting stood at the last check, and since when."""


@dataclass(frozen=True)
class Blocked:
    """A partition a consumer is blocked on."""

    partition: int
    index: int
    """The message it is stuck on: the first one not acknowledged."""
    since_ms: int


def sequential_consumers() -> list[ConsumerPolicy]:
    """The checked consumers that consume in order."""
    return [p for p in watched_consumers() if p.sequential or p.topic.type == Topic.Type.SEQUENTIAL]


PROGRESS_CHUNK = 500
"""Consumers whose progress one round trip reads."""


def _progress(policies: list[ConsumerPolicy]) -> dict[str, list[PartitionProgress]]:
    """Each consumer's progress per partition, in one round trip per PROGRESS_CHUNK."""

    async def read(engine) -> dict[str, list[PartitionProgress]]:
        out: dict[str, list[PartitionProgress]] = {}
        for at in range(0, len(policies), PROGRESS_CHUNK):
            chunk = policies[at : at + PROGRESS_CHUNK]
            got = await engine.groups_progress([(p.topic.code, p.app.code) for p in chunk])
            for p in chunk:
                if (rows := got.get((p.topic.code, p.app.code))) is not None:
                    out[p.name] = rows
        return out

    return run_in_session(read) if policies else {}


def find_blocked(
    rows: list[PartitionProgress],
    name: str,
    last: dict[str, str],
    keep: dict[str, str],
    now_ms: int,
    threshold_ms: int,
) -> list[Blocked]:
    """The partitions of consumer ``name`` (``rows``: its progress now) blocked for at
    least ``threshold_ms``; where each waiting partition's ack index stands goes into
    ``keep`` (from ``last``, the previous check's, while it has not moved)."""
    blocked = []
    for r in rows:
        if r.lag <= 0:
            continue  # nothing waits: whatever it does, it is not blocked
        field = f"{name}|{r.partition}"
        ack, _, since = last.get(field, "").partition(":")
        if ack != str(r.ack_index) or not since.isdigit():
            keep[field] = f"{r.ack_index}:{now_ms}"  # moved (or first seen): from now
            continue
        keep[field] = last[field]
        stuck_for = now_ms - int(since)
        if stuck_for >= threshold_ms and now_ms - r.last_access_ms <= threshold_ms:
            blocked.append(Blocked(r.partition, max(r.ack_index, r.min_index), int(since)))
    return blocked


def check_blocked(now_ms: int | None = None) -> list[AlertEvent]:
    """Fire an alert for every checked sequential consumer blocked on some partition;
    keep where the waiting partitions stand for the next check."""
    threshold_ms = int(settings.CONSUMER_BLOCKED_ALERT_S * 1000)
    client = redis.Redis.from_url(settings.REDIS_URL)
    fired: list[AlertEvent] = []
    try:
        if threshold_ms <= 0:
            client.delete(SINCE)
            return []
        policies = sequential_consumers()
        progress = _progress(policies)
        by_name = {p.name: p for p in policies}
        now = now_ms if now_ms is not None else int(time.time() * 1000)
        last = {k.decode(): v.decode() for k, v in client.hgetall(SINCE).items()}
        keep: dict[str, str] = {}
        for name, rows in sorted(progress.items()):
            blocked = find_blocked(rows, name, last, keep, now, threshold_ms)
            if not blocked or not first_in_window(client, f"blocked:{name}"):
                continue
            policy = by_name[name]
            longest = max((now - b.since_ms) // 1000 for b in blocked)
            where = ", ".join(f"partition {b.partition}, message {b.index}" for b in blocked)
            event = alert_team(
                AlertEvent.Kind.CONSUMER_BLOCKED,
                f"consumer:{name}",
                policy.app.team,
                f"Consumer {name} blocked for {longest} s: {where}",
                {
                    "partitions": [
                        {"partition": b.partition, "index": b.index,
                         "blocked_s": (now - b.since_ms) // 1000}
                        for b in blocked
                    ],
                    "threshold_s": settings.CONSUMER_BLOCKED_ALERT_S,
                },
            )  # fmt: skip
            fired.append(event)
        pipe = client.pipeline(transaction=False)
        pipe.delete(SINCE)
        if keep:
            pipe.hset(SINCE, mapping=keep)
        pipe.execute()
    finally:
        client.close()
    return fired
