"""Dead-letter alerts: a consumer whose dead-letter queue grew since the last check (every
minute) alerts its team — a message moves there only after its retries ran out, so nothing
fails silently. Consumers with their alerts switched off (``backlog_alert_enabled``, the
consumer's alert switch) are not checked. The counts of every consumer are read in
batches of LAG_BATCH groups, one Redis round trip each (``Engine.dead_letter_counts``,
:mod:`.watched`);
the count each had at the last check is kept in one Redis hash, and an alert key fires at
most once per ALERT_THROTTLE_SECONDS, as backlog alerts do.
"""

from __future__ import annotations

import redis
from django.conf import settings

from mqcloud.alerts.delivery import alert_team, first_in_window
from mqcloud.alerts.models import AlertEvent
from mqcloud.alerts.watched import per_consumer, watched_consumers

LAST_COUNTS = "mqcloud:alert:dead-letter-counts"
"""Hash: consumer policy name → its dead letters at the last check."""


def check_dead_letters() -> list[AlertEvent]:
    """Fire an alert for every checked consumer with more dead letters than at the last
    check (or any, the first time it is seen); keep the counts for the next check."""
    policies = watched_consumers()
    counts = per_consumer(policies, lambda engine, groups: engine.dead_letter_counts(groups))
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
            event = alert_team(
                AlertEvent.Kind.DEAD_LETTERS,
                f"consumer:{name}",
                policy.app.team,
                f"Dead letters of {name}: {new} new, {count} in all",
                {"new": new, "dead_letters": count},
            )
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
