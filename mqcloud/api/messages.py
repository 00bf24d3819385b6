"""``GET /api/v1/topics/{code}/messages/``: stored messages by partition and index — what the
console's message browser shows: every property, the producing protocol, the client — and
``GET /api/v1/topics/{code}/messages/search/``: the messages stored in a time window, or
those an id a client saw names (a msgId, a businessId, ``partition:index``, a VibeMQ or
zbus id: :mod:`pipeline.ids`), as the browser's search finds them."""

from __future__ import annotations

import time
from dataclasses import asdict

from rest_framework import exceptions, serializers

from brokers.models import Topic
from mqcloud.api.errors import EngineUnavailableError
from mqcloud.api.history import TimeWindow
from mqcloud.console import engine_calls
from mqcloud.console.message_properties import PROTOCOLS
from mqcloud.console.messages import DEFAULT_WINDOW_MS, search
from pipeline import ids

MAX_COUNT = 200
MAX_INDEX = 2**62


class MessageQuery(serializers.Serializer):
    """Query parameters of the message list."""

    partition = serializers.IntegerField(
        min_value=0,
        max_value=1023,
        help_text="A partition of the topic: below its `partitions` (400 otherwise).",
    )
    start = serializers.IntegerField(
        min_value=0,
        max_value=MAX_INDEX,
        required=False,
        default=0,
        help_text="First index. A start past the partition's last index lists nothing"
        " (an empty list, as when the partition holds nothing from there yet).",
    )
    count = serializers.IntegerField(
        min_value=1, max_value=MAX_COUNT, required=False, default=20, help_text="At most this many."
    )


class StoredMessageSerializer(serializers.Serializer):
    """One stored record (a batch takes ``count`` indexes from ``index``)."""

    partition = serializers.IntegerField()
    index = serializers.IntegerField()
    count = serializers.IntegerField()
    protocol = serializers.ChoiceField(choices=list(PROTOCOLS), help_text="Who produced it.")
    business_id = serializers.CharField()
    app = serializers.CharField()
    client_address = serializers.CharField(help_text="The producer's host:port.")
    priority = serializers.IntegerField()
    send_time = serializers.CharField(help_text="UTC, as the producer stamped it.")
    store_time = serializers.CharField(help_text="UTC.")
    store_time_ms = serializers.IntegerField()
    size = serializers.IntegerField()
    body_preview = serializers.CharField(help_text="The body as text, or hex when binary; cut.")
    body_is_text = serializers.BooleanField()
    properties = serializers.DictField(
        child=serializers.CharField(),
        help_text="Every property: JMQ4 attributes, zbus and VibeMQ headers, HTTP-MQ keys.",
    )
    item_ids = serializers.ListField(child=serializers.CharField())


def read_messages(topic: Topic, query: dict) -> list[dict]:
    """The records the query names, as StoredMessageSerializer data: none when ``start``
    lies past the partition's end; 503 when the message store does not answer."""
    if query["partition"] >= topic.partitions:
        raise exceptions.ValidationError(
            {"partition": [f"The topic has partitions 0–{topic.partitions - 1}."]}
        )
    try:
        rows = engine_calls.read_range(
            topic.code, query["partition"], query["start"], query["count"]
        )
    except engine_calls.PastTheEnd:
        return []
    except engine_calls.EngineUnavailable as exc:
        raise EngineUnavailableError(str(exc)) from None
    return StoredMessageSerializer([asdict(r) for r in rows], many=True).data


class MessageSearch(TimeWindow):
    """Query parameters of the message search."""

    id = serializers.CharField(
        required=False,
        max_length=200,
        help_text="A message id or businessId a client saw: HTTP-MQ msgId or offsetMsgId,"
        " JMQ4 businessId or partition:index, a VibeMQ or zbus message id. Absent: every"
        " message of the window.",
    )
    partition = serializers.IntegerField(
        min_value=0, max_value=1023, required=False, help_text="Only this partition."
    )
    count = serializers.IntegerField(
        min_value=1, max_value=MAX_COUNT, required=False, default=20, help_text="At most this many."
    )

    def validate(self, attrs: dict) -> dict:
        until = attrs.get("until")
        if until is None:
            until = attrs["until"] = int(time.time() * 1000)
        if attrs.get("since") is None:
            attrs["since"] = max(0, until - DEFAULT_WINDOW_MS)
        if attrs["since"] > until:
            raise serializers.ValidationError({"until": ["Must not be before `since`."]})
        return attrs


class MessageSearchResult(serializers.Serializer):
    results = StoredMessageSerializer(many=True)
    truncated = serializers.BooleanField(
        help_text=f"The scan stopped at its limit ({engine_calls.SCAN_LIMIT} records per"
        " partition, or `count` found) before the end of the window: narrow it."
    )


def search_messages(topic: Topic, query: dict) -> dict:
    """What MessageSearch names, as MessageSearchResult data (503 when the message store
    does not answer)."""
    partition = query.get("partition")
    if partition is not None and partition >= topic.partitions:
        raise exceptions.ValidationError(
            {"partition": [f"The topic has partitions 0–{topic.partitions - 1}."]}
        )
    message_id = None
    if query.get("id"):
        try:
            message_id = ids.parse(topic.code, query["id"])
        except ValueError as exc:
            raise exceptions.ValidationError({"id": [str(exc)]}) from None
    try:
        found = search(topic, message_id, partition, query["since"], query["until"], query["count"])
    except engine_calls.EngineUnavailable as exc:
        raise EngineUnavailableError(str(exc)) from None
    rows = StoredMessageSerializer([asdict(r) for r in found.rows], many=True).data
    return {"results": rows, "truncated": found.truncated}
