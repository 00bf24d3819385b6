"""Produce-refusal alerts ("producer exceptions"): an app whose messages the engine
refused at least PRODUCE_REFUSAL_ALERT_PER_HOUR times (10 by default; 0: off) on a topic
in the last hour alerts its team, with why — over its rate limit, too large, invalid,
not allowed (no producer policy, a blacklisted address), its queue full: what the
producer can change, and what its own logs may not show the platform team. The engine
counts refusals per producer and minute whatever the protocol (``Engine.produce_refusals``:
two Redis round trips whatever the number of producers, only those with refusals are
read); an alert key fires at most once per ALERT_THROTTLE_SECONDS, as the other alerts
do. Checked every minute.
"""

from __future__ import annotations

import redis
from django.conf import settings

from brokers.models import App
from mqcloud.alerts.delivery import alert_team, first_in_window
from mqcloud.alerts.models import AlertEvent
from mqcloud.engine_access import run_in_session

WINDOW_MINUTES = 60
WHY = {
    "rate_limited": "over its rate limit",
    "too_large": "too large",
    "invalid": "invalid",
    "not_allowed": "not allowed",
    "queue_full": "queue full",
}


def describe(by_reason: dict[str, int]) -> str:
    """``{"rate_limited": 40, "too_large": 3}`` as "over its rate limit 40, too large 3"."""
    return ", ".join(
        f"{WHY.get(kind, kind)} {n}"
        for kind, n in sorted(by_reason.items(), key=lambda kv: (-kv[1], kv[0]))
    )


def check_refusals() -> list[AlertEvent]:
    """Fire an alert for every producer refused at least the threshold of messages in
    the last hour."""
    threshold = settings.PRODUCE_REFUSAL_ALERT_PER_HOUR
    if threshold <= 0:
        return []
    refused = run_in_session(lambda engine: engine.produce_refusals(minutes=WINDOW_MINUTES))
    over = {pair: kinds for pair, kinds in refused.items() if sum(kinds.values()) >= threshold}
    if not over:
        return []
    apps = {
        a.code: a
        for a in App.objects.filter(code__in={app for _, app in over}).select_related("team")
    }
    client = redis.Redis.from_url(settings.REDIS_URL)
    fired: list[AlertEvent] = []
    try:
        for (topic, code), kinds in sorted(over.items()):
            app = apps.get(code)
            if app is None or not first_in_window(client, f"produce-refusals:{topic}:{code}"):
                continue  # an app deleted since: nobody to tell
            total = sum(kinds.values())
            why = describe(kinds)
            event = alert_team(
                AlertEvent.Kind.PRODUCE_REFUSALS,
                f"producer:{code}.{topic}",
                app.team,
                f"Produce refusals of {code} on {topic}: {total} in the last hour ({why})",
                {"refused": total, "by_reason": kinds, "threshold": threshold},
            )
            fired.append(event)
    finally:
        client.close()
    return fired
