"""``GET /api/v1/apps/{code}/produce-latency/``: the producer statistics of an app — per
topic and client host, how long the broker took to store its messages (fixed latency
buckets and the percentiles they give) and how many failed, over the last hours; kept
10 days (:mod:`brokers.engine.produce_latency`)."""

from __future__ import annotations

from rest_framework import serializers

from brokers.engine import LATENCY_BOUNDS_MS as BOUNDS_MS
from brokers.engine import PRODUCE_LATENCY_MAX_HOURS as MAX_HOURS
from mqcloud.console.engine_calls import ProduceLatencyRow


class HoursQuery(serializers.Serializer):
    hours = serializers.IntegerField(
        min_value=0,
        max_value=MAX_HOURS,
        default=1,
        help_text="Whole hours before the current one to cover (0: the current hour only;"
        " beyond 24, the whole UTC days they touch;"
        f" at most {MAX_HOURS}, the 10 days kept).",
    )


class BucketSerializer(serializers.Serializer):
    le_ms = serializers.IntegerField(
        allow_null=True,
        help_text="The bucket's upper bound in ms; null: slower than every bound.",
    )
    messages = serializers.IntegerField()


class ClientLatencySerializer(serializers.Serializer):
    """One client host's appends to one topic over the window."""

    topic = serializers.CharField()
    client = serializers.CharField(help_text="The client's host (its ports left out).")
    messages = serializers.IntegerField(help_text="Messages stored.")
    failed = serializers.IntegerField(
        help_text="Messages refused or not stored (why: the app's refusals)."
    )
    p50_ms = serializers.IntegerField(
        allow_null=True,
        help_text="Upper bound (ms) of the bucket holding the median store time; null when"
        " nothing was stored or it is slower than every bound.",
    )
    p90_ms = serializers.IntegerField(allow_null=True)
    p99_ms = serializers.IntegerField(allow_null=True)
    buckets = BucketSerializer(many=True, help_text="Messages per store-time bucket.")


def to_data(rows: list[ProduceLatencyRow]) -> list[dict]:
    """The serializer's data of the rows."""
    bounds: list[int | None] = [*BOUNDS_MS, None]
    return [
        {
            "topic": r.topic,
            "client": r.client,
            "messages": r.latency.messages,
            "failed": r.latency.failed,
            "p50_ms": r.latency.percentile(0.5),
            "p90_ms": r.latency.percentile(0.9),
            "p99_ms": r.latency.percentile(0.99),
            "buckets": [
                {"le_ms": le, "messages": n}
                for le, n in zip(bounds, r.latency.buckets, strict=True)
                if n
            ],
        }
        for r in rows
    ]
