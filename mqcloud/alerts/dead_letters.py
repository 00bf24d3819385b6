"""Dead-letter alerts: a consumer whose dead-letter queue grew since the last check (every
minute) alerts its team — a message moves there only after its retries ran out, so nothing
fails silently. Consumers with their alerts switched off (``backlog_alert_enabled``, the
consumer's alert switch) are not checked. The counts of every consumer are read in
batches of LAG_BATCH groups, one Redis round trip each (``Engine.dead_letter_counts``);
the count each had at the last check is kept in one Redis hash, and an alert key fires at
most once per ALERT_THROTTLE_SECONDS, as backlog alerts do.
"""

from __future__ import annotations

import redis
from asgiref.sync import async_to_sync
from django.conf import settings

from brokers.models import ConsumerPolicy
from mqcloud.alerts.backlog import LAG_BATCH
from mqcloud.alerts.delivery import deliver, first_in_window, team_emails
from mqcloud.alerts.models import AlertEvent
from mqcloud.engine_access import engine_session

LAST_COUNTS = "mqcloud:alert:dead-letter-counts"
"""Hash: consumer policy name → its dead letters at the last check."""


async def _counts(policies: list[ConsumerPolicy]) -> dict[str, int]:
    found: dict[str, int] = {}
    async with engine_session() as engine:
        for start in range(0, len(policies), LAG_BATCH):
            batch = policies[start : start + LAG_BATCH]
            counts = await engine.dead_letter_counts([(p.topic.code, p.app.code) for p in batch])
            for p in batch:
                n = counts.get((p.topic.code, p.app.code))
                if n is not None:
                    found[p.name] = n
    return found


def check_dead_letters() -> list[AlertEvent]:
    """Fire an alert for every checked consumer with more dead letters than at the last
    check (or any, the first time it is seen); keep the counts for the next check."""
    policies = list(
        ConsumerPolicy.objects.filter(backlog_alert_enabled=True).select_related(
            "topic", "app__team"
        )
    )
    counts = async_to_sync(_counts)(policies)
    by_name = {p.name: p for p in policies}
    client = redis.Redis.from_url(settings.REDIS_URL)
    fired: list[AlertEvent] = []
    try:
        last = {k.decode(): int(v) for k, v in client.hgetall(LAST_COUNTS).items()}
        for name, count in sorted(counts.items()):
            new = count - last.get(name, 0)
            if new <= 0:
                continue
            if not first_in_window(client, f"dead-letters:{name}"):
                continue
            policy = by_name[name]
            event = AlertEvent.objects.create(
                kind=AlertEvent.Kind.DEAD_LETTERS,
                target=f"consumer:{name}",
                team=policy.app.team,
                message=f"Dead letters of {name}: {new} new, {count} in all",
                detail={"new": new, "dead_letters": count},
            )
            deliver(event, team_emails(policy.app.team))
            fired.append(event)
        pipe = client.pipeline(transaction=False)
        gone = set(last) - set(counts)
        if gone:
            pipe.hdel(LAST_COUNTS, *gone)
        if counts:
            pipe.hset(LAST_COUNTS, mapping=counts)
        pipe.execute()
    finally:
        client.close()
    return fired
