"""Per-minute history through the API: a topic's traffic and a consumer's lag.

The console draws these as charts from ``traffic.json`` and ``lag.json``, views that take
a login session only; a monitoring job with an API token had no way to them. Here they are
rows of UTC minutes: ``GET /api/v1/topics/{code}/traffic/`` (the engine's live counters,
with the pipeline rollup's produce→store latency) and ``GET
/api/v1/consumers/{name}/lag-history/`` (the lag the rollup sampled each minute). A
minute the counters do not cover (older than their 30 days, or not begun) is null, as a
minute the rollup has not sampled.
"""

from __future__ import annotations

import time

from rest_framework import serializers

from brokers.models import ConsumerPolicy, Topic
from mqcloud.console import rollups
from mqcloud.console.topics import series

HOUR_MS = 3_600_000
MAX_WINDOW_MS = 24 * HOUR_MS


class TimeWindow(serializers.Serializer):
    """``since`` and ``until`` in epoch ms (defaults: the hour up to now), checked by the
    query that uses them."""

    since = serializers.IntegerField(
        min_value=0,
        max_value=2**53,
        required=False,
        help_text="Start, epoch ms (default: an hour before `until`).",
    )
    until = serializers.IntegerField(
        min_value=0, max_value=2**53, required=False, help_text="End, epoch ms (default: now)."
    )


class WindowQuery(TimeWindow):
    """A window of whole UTC minutes: [since, until) in epoch ms, at most 24 h."""

    def validate(self, attrs: dict) -> dict:
        until = attrs.get("until")
        if until is None:
            until = attrs["until"] = (int(time.time() * 1000) // 60_000 + 1) * 60_000
        if attrs.get("since") is None:
            attrs["since"] = max(0, until - HOUR_MS)
        if attrs["since"] >= until:
            raise serializers.ValidationError({"until": ["Must be after `since`."]})
        if until - attrs["since"] > MAX_WINDOW_MS:
            raise serializers.ValidationError({"since": ["The window is at most 24 hours."]})
        return attrs


class TrafficMinuteRowSerializer(serializers.Serializer):
    minute_ms = serializers.IntegerField(help_text="The UTC minute, epoch ms.")
    produced = serializers.IntegerField(allow_null=True)
    consumed = serializers.IntegerField(allow_null=True)
    produced_bytes = serializers.IntegerField(allow_null=True)
    consumed_bytes = serializers.IntegerField(allow_null=True)
    latency_p50_ms = serializers.IntegerField(
        allow_null=True, help_text="Produce→store latency, from the pipeline rollup."
    )
    latency_p99_ms = serializers.IntegerField(allow_null=True)


class TopicTrafficHistorySerializer(serializers.Serializer):
    topic = serializers.CharField()
    since = serializers.IntegerField()
    until = serializers.IntegerField()
    total_produced = serializers.IntegerField()
    total_consumed = serializers.IntegerField()
    minutes = TrafficMinuteRowSerializer(many=True)


class LagMinuteRowSerializer(serializers.Serializer):
    minute_ms = serializers.IntegerField(help_text="The UTC minute, epoch ms.")
    lag = serializers.IntegerField(allow_null=True, help_text="Null: no sample that minute.")


class ConsumerLagHistorySerializer(serializers.Serializer):
    consumer = serializers.CharField()
    since = serializers.IntegerField()
    until = serializers.IntegerField()
    minutes = LagMinuteRowSerializer(many=True)


def topic_traffic(topic: Topic, window: dict) -> dict:
    """TopicTrafficHistorySerializer data (the engine's counters: EngineUnavailable when the
    store does not answer)."""
    since, until = window["since"], window["until"]
    counts = series("topic", topic.code, since, until)
    latency = rollups.latency(topic.code, since, until)
    rows = [
        {
            "minute_ms": minute,
            "produced": counts["produced"][i],
            "consumed": counts["consumed"][i],
            "produced_bytes": counts["produced_bytes"][i],
            "consumed_bytes": counts["consumed_bytes"][i],
            "latency_p50_ms": latency["latency_p50"][i],
            "latency_p99_ms": latency["latency_p99"][i],
        }
        for i, minute in enumerate(rollups.minutes_of(since, until))
    ]
    return {
        "topic": topic.code,
        "since": since,
        "until": until,
        "total_produced": counts["total_produced"],
        "total_consumed": counts["total_consumed"],
        "minutes": rows,
    }


def consumer_lag(consumer: ConsumerPolicy, window: dict) -> dict:
    """ConsumerLagHistorySerializer data, from the rollup's samples in PostgreSQL."""
    since, until = window["since"], window["until"]
    sampled = rollups.lag(consumer.topic.code, consumer.app.code, since, until)["lag"]
    minutes = rollups.minutes_of(since, until)
    return {
        "consumer": consumer.name,
        "since": since,
        "until": until,
        "minutes": [{"minute_ms": m, "lag": sampled[i]} for i, m in enumerate(minutes)],
    }
