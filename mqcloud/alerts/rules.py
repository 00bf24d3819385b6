"""Topics' own traffic rules (console-features "custom topic rules"): a team sets, per
topic, any number of rules that alert the topic's traffic-alert receiver (its
``surge_alert_receiver``: the teams of its producers or of its consumers, the platform
admins, or nobody) when they match.

A rule compares an operand with a threshold (``>``, ``≥``, ``<``, ``≤``):

- a count: messages produced to the topic in the last 5 minutes, hour or day (whole
  minutes, the current one left out as it is still filling);
- a change: that count against the same span just before it, in percent
  (``(now − before) / before × 100``: −100 when it stopped, 200 when it tripled). A span
  before with no message has no percentage, and the rule is not checked then.

Counts come from the engine's per-minute produce counters (every protocol and broker
together, kept 30 days), so a rule sees the traffic of a minute ago, not the pipeline's
rollup of several minutes ago. A rule is checked every ``every_minutes`` (1–1440), and
only between ``active_from`` and ``active_to`` (times of day in the rule's ``time_zone``,
UTC by default; past midnight when the end is earlier) when it has them. Any matching
rule alerts; each rule at most once per ``ALERT_THROTTLE_SECONDS``, as the other alerts.

The beat task runs every minute and checks the rules due: one engine call per span for
all their topics (two for the changes: the span and twice it).
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from django.db.models import Q

from mqcloud.alerts.delivery import TrafficAlert, fire_traffic_alerts
from mqcloud.alerts.models import AlertEvent, TrafficRule
from mqcloud.engine_access import run_in_session

SPAN_MINUTES = {"5m": 5, "1h": 60, "1d": 1440}
"""Each operand's span, by its suffix."""
COMPARE: dict[str, Callable[[float, float], bool]] = {
    TrafficRule.Operator.GT: operator.gt,
    TrafficRule.Operator.GTE: operator.ge,
    TrafficRule.Operator.LT: operator.lt,
    TrafficRule.Operator.LTE: operator.le,
}


def span_of(rule: TrafficRule) -> int:
    """The rule's span in minutes."""
    return SPAN_MINUTES[rule.operand.rsplit("_", 1)[1]]


def active_at(rule: TrafficRule, now: datetime) -> bool:
    """Whether ``now`` (an aware datetime) falls within the rule's daily window, in its
    time zone (a zone the system no longer knows counts as UTC)."""
    start, end = rule.active_from, rule.active_to
    if start is None or end is None:
        return True
    try:
        zone: tzinfo = ZoneInfo(rule.time_zone)
    except (ZoneInfoNotFoundError, ValueError):
        zone = UTC
    moment = now.astimezone(zone).time().replace(tzinfo=None)
    if start <= end:
        return start <= moment <= end
    return moment >= start or moment <= end  # past midnight


def due_rules(now: datetime) -> list[TrafficRule]:
    """The rules to check now: never checked, or last checked ``every_minutes`` ago or
    more (a few seconds' slack, so a rule every minute is not skipped by beat's jitter),
    within their daily window, on a topic older than what they measure (a day's count
    of a topic created an hour ago says nothing of a day)."""
    rules = (
        TrafficRule.objects.select_related("topic", "topic__team")
        .filter(Q(checked_at__isnull=True) | Q(checked_at__lte=now - timedelta(seconds=55)))
        .order_by("id")
    )
    return [
        r
        for r in rules
        if (
            r.checked_at is None
            or r.checked_at <= now - timedelta(minutes=r.every_minutes, seconds=-5)
        )
        and active_at(r, now)
        and r.topic.created_at <= now - timedelta(minutes=span_of(r) * (2 if r.is_change else 1))
    ]


@dataclass(frozen=True)
class Match:
    """A rule that matched, and the value it matched with."""

    rule: TrafficRule
    value: float
    count: int
    before: int | None
    """The count of the span before (for a change)."""


def measure(rules: list[TrafficRule], now_ms: int) -> list[Match]:
    """The rules of ``rules`` that match now (topics the engine does not know are left
    out: nothing was produced to them yet, and they will be known within seconds)."""
    spans: dict[int, set[str]] = {}
    doubled: dict[int, set[str]] = {}
    for rule in rules:
        spans.setdefault(span_of(rule), set()).add(rule.topic.code)
        if rule.is_change:
            doubled.setdefault(span_of(rule), set()).add(rule.topic.code)

    async def read(engine) -> dict[tuple[int, str], int]:
        known = engine.catalog.topics
        counts: dict[tuple[int, str], int] = {}
        for minutes, topics in [*spans.items(), *((2 * m, t) for m, t in doubled.items())]:
            codes = sorted(t for t in topics if t in known)
            rates = await engine.produce_rates(codes, minutes=minutes, now_ms=now_ms)
            counts.update({(minutes, code): rates[code].produced for code in codes})
        return counts

    counts = run_in_session(read) if rules else {}
    matches = []
    for rule in rules:
        minutes, code = span_of(rule), rule.topic.code
        count = counts.get((minutes, code))
        if count is None:
            continue
        before = None
        value: float = count
        if rule.is_change:
            before = counts[(2 * minutes, code)] - count
            if before <= 0:
                continue  # no percentage of nothing
            value = (count - before) / before * 100
        if COMPARE[rule.operator](value, rule.threshold):
            matches.append(Match(rule, value, count, before))
    return matches


def _message(match: Match) -> str:
    rule = match.rule
    shown = f"{match.value:+.0f}%" if rule.is_change else f"{match.count}"
    return f"Traffic rule on {rule.topic.code}: {rule.describe()} matched ({shown})"


def check_rules(now: datetime | None = None) -> list[AlertEvent]:
    """Check the rules due, alert for those that match, and mark them checked."""
    now = now or datetime.now(UTC)
    rules = due_rules(now)
    if not rules:
        return []
    matches = measure(rules, int(now.timestamp() * 1000))
    TrafficRule.objects.filter(pk__in=[r.pk for r in rules]).update(checked_at=now)
    return fire_traffic_alerts(
        TrafficAlert(
            AlertEvent.Kind.TRAFFIC_RULE,
            m.rule.topic,
            f"rule:{m.rule.pk}",
            _message(m),
            {
                "rule": m.rule.pk,
                "operand": m.rule.operand,
                "operator": m.rule.operator,
                "threshold": m.rule.threshold,
                "value": round(m.value, 2),
                "count": m.count,
                "before": m.before,
            },
        )
        for m in matches
    )
