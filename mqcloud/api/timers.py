"""``GET /api/v1/topics/{code}/delayed/``: the delayed and timer messages a topic still
holds, soonest due first — what the console's timer list shows. Cancelling them is an
application of kind ``timer_cancel`` (``POST /api/v1/applications/``)."""

from __future__ import annotations

from dataclasses import asdict

from rest_framework import exceptions, serializers

from brokers.models import Topic
from mqcloud.api.errors import EngineUnavailableError
from mqcloud.console import engine_calls
from mqcloud.console.timers import delay_id_of, held_page

MAX_LIMIT = 500


class DelayedQuery(serializers.Serializer):
    """Query parameters of the held-message list."""

    id = serializers.CharField(
        required=False,
        max_length=200,
        help_text="Only the message with this delay id, or with this HTTP-MQ msgId (what"
        " the producer got). Text that is neither is refused with 400.",
    )
    due_from = serializers.IntegerField(
        min_value=0, max_value=2**53, required=False, help_text="Due at or after, epoch ms."
    )
    due_until = serializers.IntegerField(
        min_value=0,
        max_value=2**53,
        required=False,
        help_text="Due at or before, epoch ms (before `due_from`: nothing matches).",
    )
    offset = serializers.IntegerField(
        min_value=0, max_value=10**9, required=False, default=0, help_text="Skip this many."
    )
    limit = serializers.IntegerField(
        min_value=1, max_value=MAX_LIMIT, required=False, default=50, help_text="At most this many."
    )


class DelayedMessageSerializer(serializers.Serializer):
    """A delayed or timer message still held."""

    delay_id = serializers.IntegerField(help_text="What a timer_cancel application names.")
    message_id = serializers.CharField(help_text="The msgId HTTP-MQ gave its producer.")
    due = serializers.CharField(help_text="When it is delivered, UTC.")
    app = serializers.CharField(help_text="The producing app.")
    partition = serializers.IntegerField(
        allow_null=True, help_text="The partition it goes to; null: chosen when it is due."
    )
    business_id = serializers.CharField()
    properties = serializers.DictField(child=serializers.CharField())
    body_preview = serializers.CharField(help_text="The body as text, or hex when binary; cut.")


class DelayedPage(serializers.Serializer):
    count = serializers.IntegerField(help_text="How many held messages match.")
    results = DelayedMessageSerializer(many=True)


def delayed_messages(topic: Topic, query: dict) -> dict:
    """One DelayedPage of ``topic``'s held messages (503 when the store does not answer)."""
    data: dict = {"due_from": query.get("due_from"), "due_to": query.get("due_until")}
    if query.get("id") is not None:
        delay_id = delay_id_of(topic.code, query["id"])
        if delay_id is None:
            raise exceptions.ValidationError(
                {"id": ["Not the id of a delayed message: a delay id or a delayed msgId."]}
            )
        data["message_id"] = delay_id
    try:
        total, rows = held_page(topic.code, data, query["offset"], query["limit"])
    except engine_calls.EngineUnavailable as exc:
        raise EngineUnavailableError(str(exc)) from None
    results = DelayedMessageSerializer([asdict(r) for r in rows], many=True).data
    return {"count": total, "results": results}
