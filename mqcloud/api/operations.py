"""API of consumers: the list with lag, and the operations the console runs directly on a
consumer's messages.

``/api/v1/consumers/``: the caller's consumers with total lag, oldest unacked age and
state, sortable by lag (the console's consumer list). ``/api/v1/consumers/{name}/``: the
same for one, per-partition progress, the failures of the last hour (and how many the
topic's send-back limit held back), the retry and dead-letter lists, and retry-now, skip
and purge (team admins, audited) — what the consumer and retry pages offer.
Resending dead letters and moving offsets change the cluster, so they are applications
(kinds ``dlq_resend``, ``offset_reset``, ``skip_backlog``).
"""

from __future__ import annotations

import time
from dataclasses import asdict

from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import exceptions, serializers, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.utils.urls import replace_query_param

from brokers.models import ConsumerPolicy
from brokers.topic_codes import TOPIC_CODE_MAX
from mqcloud.api import history
from mqcloud.api.errors import EngineUnavailableError
from mqcloud.api.fields import StrictIntegerField
from mqcloud.api.query import validated_query
from mqcloud.approvals.services import record
from mqcloud.console import access, engine_calls, lag

MAX_PAGE = 500


class ConsumerRefSerializer(serializers.ModelSerializer):
    topic = serializers.SlugRelatedField(slug_field="code", read_only=True)
    app = serializers.SlugRelatedField(slug_field="code", read_only=True)

    class Meta:
        model = ConsumerPolicy
        fields = ["name", "topic", "app", "mode", "paused", "rate_limit"]
        read_only_fields = fields


class ConsumerLagSerializer(serializers.Serializer):
    """A consumer as the console's list shows it."""

    name = serializers.CharField(source="consumer.name")
    topic = serializers.CharField(source="consumer.topic.code")
    app = serializers.CharField(source="consumer.app.code")
    team = serializers.CharField(source="consumer.app.team.name")
    mode = serializers.CharField(source="consumer.mode")
    paused = serializers.BooleanField(source="consumer.paused")
    state = serializers.ChoiceField(choices=["running", "paused"])
    rate_limit = serializers.IntegerField(source="consumer.rate_limit", allow_null=True)
    lag = serializers.IntegerField(
        allow_null=True,
        help_text="Messages stored and not yet acknowledged, over all partitions (the"
        " consumer page's total lag). Null when the message store did not answer.",
    )
    oldest_unacked_age_ms = serializers.IntegerField(
        allow_null=True,
        help_text="How long the oldest unacknowledged message has waited; null when none"
        " waits (or the store did not answer).",
    )
    lagging_partitions = serializers.IntegerField(allow_null=True)


class ConsumerListQuery(serializers.Serializer):
    """Query parameters of the consumer list."""

    ordering = serializers.ChoiceField(
        choices=list(lag.SORTS),
        required=False,
        default=lag.DEFAULT_SORT,
        help_text="name, -name, lag (smallest first) or -lag (largest first). Over more than"
        " 500 consumers a lag sort orders by the lag the periodic backlog check last recorded"
        " (the rows still show the live lag).",
    )
    # Taken as given (not trimmed): a value of blanks is a value the schema allows, and
    # it matches what it says, not "no filter" nor a 400.
    search = serializers.CharField(
        required=False,
        max_length=200,
        trim_whitespace=False,
        help_text="Part of the consumer's name.",
    )
    team = serializers.CharField(
        required=False, max_length=100, trim_whitespace=False, help_text="The app's team."
    )
    topic = serializers.CharField(
        required=False, max_length=TOPIC_CODE_MAX, trim_whitespace=False, help_text="Topic code."
    )
    app = serializers.CharField(
        required=False, max_length=255, trim_whitespace=False, help_text="App code."
    )
    state = serializers.ChoiceField(
        choices=["running", "paused"], required=False, help_text="running or paused."
    )
    limit = serializers.IntegerField(required=False, min_value=1, max_value=MAX_PAGE, default=50)
    offset = serializers.IntegerField(required=False, min_value=0, max_value=10**9, default=0)


class PartitionProgressSerializer(serializers.Serializer):
    partition = serializers.IntegerField()
    min_index = serializers.IntegerField()
    max_index = serializers.IntegerField()
    ack_index = serializers.IntegerField()
    lag = serializers.IntegerField()
    lock_owner = serializers.CharField()
    lock_expires_ms = serializers.IntegerField()
    last_access_ms = serializers.IntegerField()
    last_address = serializers.CharField()


class ClientLagSerializer(serializers.Serializer):
    """The lag of one progress of a broadcast or fan-out consumer."""

    client_id = serializers.CharField(help_text="The broadcast client or fan-out member.")
    lag = serializers.IntegerField(
        help_text="Messages stored and not yet acknowledged by it, over all partitions."
    )
    oldest_unacked_age_ms = serializers.IntegerField(
        allow_null=True, help_text="How long its oldest unacknowledged message has waited."
    )
    lagging_partitions = serializers.IntegerField()


class RetryRowSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    partition = serializers.IntegerField()
    index = serializers.IntegerField()
    attempts = serializers.IntegerField()
    created = serializers.CharField(help_text="First failure, UTC.")
    due = serializers.CharField(help_text="Next attempt (retries) or death (dead letters), UTC.")
    reason = serializers.CharField()
    business_id = serializers.CharField()
    body_preview = serializers.CharField()


class IdsSerializer(serializers.Serializer):
    ids = serializers.ListField(
        child=StrictIntegerField(min_value=0), min_length=1, max_length=10_000
    )


class RetryIdsSerializer(IdsSerializer):
    client_id = serializers.CharField(
        required=False,
        max_length=128,
        help_text="A broadcast consumer's client: its own retries (404 for other consumers).",
    )


RetryPage = inline_serializer(
    "RetryPage",
    {
        "results": RetryRowSerializer(many=True),
        "retries": serializers.IntegerField(),
        "dead_letters": serializers.IntegerField(),
    },
)
Done = inline_serializer("OperationDone", {"count": serializers.IntegerField()})


class PagingQuery(serializers.Serializer):
    offset = serializers.IntegerField(
        required=False, min_value=0, max_value=10**9, help_text="Skip this many (default 0)."
    )
    limit = serializers.IntegerField(
        required=False, min_value=1, max_value=MAX_PAGE, help_text="At most this many (default 50)."
    )


class FailuresQuery(serializers.Serializer):
    minutes = serializers.IntegerField(
        required=False,
        min_value=0,
        max_value=1440,
        default=60,
        help_text="Whole minutes before the current one to count (the current one too).",
    )


class FailuresSerializer(serializers.Serializer):
    """What a consumer failed lately, whatever the protocol and broker."""

    minutes = serializers.IntegerField(help_text="The window counted, in whole minutes.")
    failures = serializers.IntegerField(
        help_text="Messages failed: nacks, JMQ4 retry acks, failed retries, VibeMQ ack "
        "timeouts, fetch locks that ran out unacked."
    )
    held_back = serializers.IntegerField(
        help_text="Of them, those the topic's send-back limit kept out of the retry store: "
        "delivered again at once instead."
    )


class ProgressQuery(serializers.Serializer):
    client_id = serializers.CharField(
        required=False, max_length=128, help_text="A broadcast consumer's client."
    )


PAGING = [PagingQuery]


class RetryPagingQuery(PagingQuery):
    client_id = serializers.CharField(
        required=False,
        max_length=128,
        help_text="A broadcast consumer's client: its own retries (404 for other consumers).",
    )


def _engine(call):
    try:
        return call()
    except engine_calls.EngineUnavailable as exc:
        raise EngineUnavailableError(str(exc)) from None


class ConsumerOperationsViewSet(viewsets.GenericViewSet):
    """A consumer's progress, retries and dead letters (consumers of the caller's apps and
    topics; every consumer for admins). Acting on messages takes a team admin of the app."""

    serializer_class = ConsumerRefSerializer
    lookup_field = "name"
    lookup_value_regex = r"[A-Za-z0-9][A-Za-z0-9._:-]*"

    def get_queryset(self) -> QuerySet[ConsumerPolicy]:
        return access.consumers_for(self.request.user)

    @extend_schema(parameters=[ConsumerListQuery], responses=ConsumerLagSerializer(many=True))
    def list(self, request: Request) -> Response:
        """The caller's consumers with lag, oldest unacked age and state (every consumer
        for platform admins); ``ordering=-lag`` puts the furthest behind first."""
        q = validated_query(ConsumerListQuery, request)
        consumers = self.get_queryset()
        if "search" in q:
            consumers = consumers.filter(name__icontains=q["search"])
        if "team" in q:
            consumers = consumers.filter(app__team__name=q["team"])
        if "topic" in q:
            consumers = consumers.filter(topic__code=q["topic"])
        if "app" in q:
            consumers = consumers.filter(app__code=q["app"])
        if "state" in q:
            consumers = consumers.filter(paused=q["state"] == "paused")
        page = lag.consumer_page(
            consumers, sort=q["ordering"], offset=q["offset"], limit=q["limit"]
        )
        url = request.build_absolute_uri()
        after, before = q["offset"] + q["limit"], q["offset"] - q["limit"]
        return Response(
            {
                "count": page.total,
                "next": replace_query_param(url, "offset", after) if after < page.total else None,
                "previous": (
                    None if q["offset"] == 0 else replace_query_param(url, "offset", max(before, 0))
                ),
                "results": ConsumerLagSerializer(page.rows, many=True).data,
            }
        )

    @extend_schema(responses=ConsumerLagSerializer)
    def retrieve(self, request: Request, name: str | None = None) -> Response:
        """One consumer with its lag, oldest unacked age and state."""
        rows, _ = lag.measure([self.get_object()])
        return Response(ConsumerLagSerializer(rows[0]).data)

    def _act(self, which: str, verb: str, ids: list[int], client_id: str | None = None) -> Response:
        consumer = self.get_object()
        _client_of(consumer, client_id)
        if not access.admin_teams(self.request.user).filter(pk=consumer.app.team_id).exists():
            raise exceptions.PermissionDenied(
                "Only the app's team admins (or platform admins) act on its messages."
            )
        name = f"{which}-{verb}"
        count = _engine(
            lambda: engine_calls.retry_action(
                consumer.topic.code, consumer.app.code, name, ids, client_id
            )
        )
        detail = {"ids": ids, "count": count, "via": "api"}
        if client_id:
            detail["client_id"] = client_id
        record(
            self.request.user,
            name,
            f"consumer:{consumer.name}",
            team=consumer.app.team,
            detail=detail,
        )
        return Response({"count": count})

    def _retry_ids(self, request: Request) -> tuple[list[int], str | None]:
        body = RetryIdsSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        return list(body.validated_data["ids"]), body.validated_data.get("client_id")

    def _ids(self, request: Request) -> list[int]:
        body = IdsSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        return list(body.validated_data["ids"])

    def _page(self, request: Request, which: str) -> Response:
        consumer = self.get_object()
        q = validated_query(RetryPagingQuery if which == "retry" else PagingQuery, request)
        offset, limit = q.get("offset", 0), q.get("limit", 50)
        client_id = _client_of(consumer, q.get("client_id"))
        rows, retries, dead = _engine(
            lambda: engine_calls.retry_lists(
                consumer.topic.code, consumer.app.code, which, offset, limit, client_id
            )
        )
        return Response(
            {
                "results": RetryRowSerializer([asdict(r) for r in rows], many=True).data,
                "retries": retries,
                "dead_letters": dead,
            }
        )

    @extend_schema(parameters=[ProgressQuery], responses=PartitionProgressSerializer(many=True))
    @action(detail=True, methods=["get"], pagination_class=None, filter_backends=[])
    def progress(self, request: Request, name: str | None = None) -> Response:
        """Per partition: min/max/ack index, lag, lock owner and expiry, last access;
        ``client_id`` names a broadcast consumer's client (404 for other consumers)."""
        consumer = self.get_object()
        client_id = validated_query(ProgressQuery, request).get("client_id")
        if client_id and not consumer.per_client:
            # A valid parameter naming what this consumer does not have: no such progress.
            raise exceptions.NotFound(
                "This consumer is not broadcast: it has no per-client progress."
            )
        rows = _engine(
            lambda: engine_calls.progress(consumer.topic.code, consumer.app.code, client_id)
        )
        return Response(PartitionProgressSerializer([asdict(r) for r in rows], many=True).data)

    @extend_schema(responses=ClientLagSerializer(many=True))
    @action(detail=True, methods=["get"], pagination_class=None, filter_backends=[])
    def clients(self, request: Request, name: str | None = None) -> Response:
        """A broadcast consumer's clients (those seen in the last 10 minutes; all of them
        when none was) or a fan-out queue's members, each with its own lag, furthest
        behind first; the consumer's lag in the list is the first one's (404 for a
        clustering consumer: it has one progress, see ``progress``)."""
        consumer = self.get_object()
        if not consumer.per_client:
            raise exceptions.NotFound("This consumer is not broadcast: it has no clients.")
        found = _engine(lambda: engine_calls.client_lags(consumer.topic.code, consumer.app.code))
        now = int(time.time() * 1000)
        rows = [
            {
                "client_id": client,
                "lag": g.lag,
                "oldest_unacked_age_ms": g.oldest_age_ms(now),
                "lagging_partitions": g.lagging_partitions,
            }
            for client, g in found
            if client is not None
        ]
        return Response(ClientLagSerializer(rows, many=True).data)

    @extend_schema(parameters=[FailuresQuery], responses=FailuresSerializer)
    @action(detail=True, methods=["get"], pagination_class=None, filter_backends=[])
    def failures(self, request: Request, name: str | None = None) -> Response:
        """Messages the consumer failed in the last ``minutes`` (60 by default) and the
        current minute, every client's, and how many of them the topic's send-back limit
        held back — what its consume-failure alert counts."""
        consumer = self.get_object()
        minutes = validated_query(FailuresQuery, request)["minutes"]
        failures, held_back = _engine(
            lambda: engine_calls.consume_failures(
                consumer.topic.code, consumer.app.code, minutes=minutes
            )
        )
        data = {"minutes": minutes, "failures": failures, "held_back": held_back}
        return Response(FailuresSerializer(data).data)

    @extend_schema(
        parameters=[history.WindowQuery], responses={200: history.ConsumerLagHistorySerializer}
    )
    @action(
        detail=True,
        methods=["get"],
        url_path="lag-history",
        pagination_class=None,
        filter_backends=[],
    )
    def lag_history(self, request: Request, name: str | None = None) -> Response:
        """The consumer's lag per UTC minute of a window (default: the last hour, at most
        24 h), as the pipeline rollup sampled it; null where it has no sample."""
        consumer = self.get_object()
        window = validated_query(history.WindowQuery, request)
        return Response(history.consumer_lag(consumer, window))

    @extend_schema(parameters=[RetryPagingQuery], responses=RetryPage)
    @action(detail=True, methods=["get"])
    def retries(self, request: Request, name: str | None = None) -> Response:
        """Messages waiting for a retry: the consumer's, or ``client_id``'s own."""
        return self._page(request, "retry")

    @extend_schema(parameters=PAGING, responses=RetryPage)
    @action(detail=True, methods=["get"], url_path="dead-letters")
    def dead_letters(self, request: Request, name: str | None = None) -> Response:
        """Dead letters (resend them with an application of kind dlq_resend)."""
        return self._page(request, "dlq")

    @extend_schema(request=RetryIdsSerializer, responses=Done)
    @action(detail=True, methods=["post"], url_path="retries/retry-now")
    def retry_now(self, request: Request, name: str | None = None) -> Response:
        """Make the listed retries due at once (team admins)."""
        return self._act("retry", "resend", *self._retry_ids(request))

    @extend_schema(request=RetryIdsSerializer, responses=Done)
    @action(detail=True, methods=["post"], url_path="retries/skip")
    def skip_retries(self, request: Request, name: str | None = None) -> Response:
        """Drop the listed retries: they count as consumed (team admins)."""
        return self._act("retry", "skip", *self._retry_ids(request))

    @extend_schema(request=IdsSerializer, responses=Done)
    @action(detail=True, methods=["post"], url_path="dead-letters/skip")
    def skip_dead_letters(self, request: Request, name: str | None = None) -> Response:
        """Drop the listed dead letters (team admins)."""
        return self._act("dlq", "skip", self._ids(request))

    @extend_schema(request=None, responses=Done)
    @action(detail=True, methods=["post"], url_path="dead-letters/purge")
    def purge_dead_letters(self, request: Request, name: str | None = None) -> Response:
        """Delete every dead letter of the consumer (team admins)."""
        return self._act("dlq", "purge", [])


def _client_of(consumer: ConsumerPolicy, client_id: str | None) -> str | None:
    """``client_id`` if the consumer is broadcast or on a fan-out queue (its clients or
    members have retries of their own); naming one of a clustering consumer: 404, there is
    no such store."""
    if client_id and not consumer.per_client:
        raise exceptions.NotFound("This consumer is not broadcast: it has no per-client retries.")
    return client_id or None
