"""Viewsets of the catalog API, each scoped to what the caller may see."""

from __future__ import annotations

from collections.abc import Callable

from django.db import transaction
from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema, extend_schema_view, inline_serializer
from rest_framework import permissions, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import PermissionDenied, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.serializers import BaseSerializer

from brokers.anonymous import with_open_flag
from brokers.erasure import STORE_ERRORS, erase_group_data, erase_topic_data
from brokers.models import App, Broker, Cluster, ConsumerPolicy, ProducerPolicy, Team, Topic
from brokers.topic_codes import TOPIC_CODE_CHARS
from mqcloud.alerts.models import TrafficRule
from mqcloud.api import filters, history, produce_latency, timers
from mqcloud.api import messages as stored  # the class body's `messages` is an action
from mqcloud.api import serializers as s
from mqcloud.api.clients import ClientSerializer, client_rows
from mqcloud.api.errors import EngineUnavailableError, error_responses
from mqcloud.api.query import validated_query
from mqcloud.api.scoping import (
    AdminWritesOnly,
    TeamAdminWrites,
    admin_teams,
    is_platform_admin,
    user_teams,
)
from mqcloud.approvals.secrets import redacted
from mqcloud.approvals.services import record
from mqcloud.console import engine_calls, lag
from mqcloud.tasks import elect_preferred_leaders

PreferredLeaderElection = inline_serializer(
    "PreferredLeaderElection",
    {
        "moves": serializers.ListField(
            child=inline_serializer(
                "PreferredLeaderMove",
                {
                    "topic": serializers.CharField(),
                    "group": serializers.IntegerField(),
                    "from": serializers.IntegerField(help_text="the broker that led the group"),
                    "to": serializers.IntegerField(help_text="its preferred leader, now leading"),
                },
            ),
            help_text="the groups moved, by topic and group",
        )
    },
)

NO_ANONYMOUS_TOKENS = (
    "An anonymous app has no tokens: token-less clients act as it on its team's topics"
    " opened to them (zbus_open). Use an app of your own for a token."
)


def write_schema(serializer: type, *, created: bool = False, detail: bool = True) -> object:
    """The schema of a write operation: its answer and every error status it gives."""
    success = status.HTTP_201_CREATED if created else status.HTTP_200_OK
    errors = (400, 401, 403, 404) if detail else (400, 401, 403)
    return extend_schema(responses={success: serializer, **error_responses(*errors)})


def policy_write_schemas(serializer: type) -> dict[str, object]:
    """Create and update of a policy: a reserved name or an anonymous app answers 400."""
    return {
        "create": write_schema(serializer, created=True, detail=False),
        "update": write_schema(serializer),
        "partial_update": write_schema(serializer),
    }


class UpdateSerializerMixin:
    """Updates (PUT, PATCH) use ``update_serializer_class``: fields fixed at creation are
    read-only there, in the API and in the schema alike."""

    update_serializer_class: type[BaseSerializer] | None = None

    def get_serializer_class(self) -> type[BaseSerializer]:
        action = getattr(self, "action", None)
        if action in ("update", "partial_update") and self.update_serializer_class:
            return self.update_serializer_class
        return super().get_serializer_class()  # type: ignore[misc]


class TeamViewSet(viewsets.ReadOnlyModelViewSet):
    """Teams the caller belongs to (all teams for platform admins)."""

    serializer_class = s.TeamSerializer
    filterset_fields = ["name"]
    search_fields = ["name", "description"]
    ordering_fields = ["name", "created_at"]

    def get_queryset(self) -> QuerySet[Team]:
        return user_teams(self.request.user).order_by("name")


class ClusterViewSet(viewsets.ModelViewSet):
    """Clusters: readable by everyone signed in, changed by platform admins."""

    queryset = Cluster.objects.all()
    serializer_class = s.ClusterSerializer
    permission_classes = [permissions.IsAuthenticated, AdminWritesOnly]
    filterset_fields = ["name"]
    search_fields = ["name", "description"]
    ordering_fields = ["name", "created_at"]

    @extend_schema(
        request=None,
        responses={200: PreferredLeaderElection, **error_responses(401, 403, 404)},
    )
    @action(
        detail=True,
        methods=["post"],
        url_path="preferred-leader-election",
        pagination_class=None,
        filter_backends=[],
    )
    def preferred_leader_election(self, request: Request, pk: str | None = None) -> Response:
        """Give every partition group of the cluster back to its preferred leader (the
        broker it was created on) where that broker is up, writable and heartbeating, now
        rather than after PREFERRED_LEADER_HEALTHY_SECONDS (platform admins; audited)."""
        cluster = self.get_object()
        return Response({"moves": elect_preferred_leaders(cluster, request.user)})


class BrokerViewSet(UpdateSerializerMixin, viewsets.ModelViewSet):
    """Brokers: readable by everyone signed in, changed by platform admins."""

    queryset = Broker.objects.select_related("cluster")
    serializer_class = s.BrokerSerializer
    update_serializer_class = s.BrokerUpdateSerializer
    permission_classes = [permissions.IsAuthenticated, AdminWritesOnly]
    filterset_fields = ["cluster__name", "status", "readable", "writable", "data_center"]
    search_fields = ["host"]
    ordering_fields = ["id", "host", "weight", "last_heartbeat"]


class AdminOrApplication(permissions.BasePermission):
    """Cluster-touching objects change directly only for platform admins; others apply."""

    message = (
        "Changes to topics, producers and consumers go through applications:"
        " POST /api/v1/applications/ (an admin approves them)."
    )

    def has_permission(self, request, view) -> bool:
        return request.method in permissions.SAFE_METHODS or is_platform_admin(request.user)


class TeamScopedViewSet(viewsets.ModelViewSet):
    """A viewset whose objects belong to a team through ``team_path``; writes are audited."""

    team_path = "team"
    audit_name = "object"

    def get_queryset(self) -> QuerySet:
        queryset = self.base_queryset()
        if is_platform_admin(self.request.user):
            return queryset
        return queryset.filter(**{f"{self.team_path}__in": user_teams(self.request.user)})

    def base_queryset(self) -> QuerySet:
        raise NotImplementedError

    def _team_of(self, obj: object) -> Team | None:
        for part in self.team_path.split("__"):
            obj = getattr(obj, part, None)
        return obj if isinstance(obj, Team) else None

    def _audit(self, action: str, obj: object, detail: dict | None = None) -> None:
        key = getattr(obj, "code", None) or getattr(obj, "name", "")
        record(
            self.request.user,
            f"{self.audit_name}-{action}",
            f"{self.audit_name}:{key}",
            team=self._team_of(obj),
            detail=detail,
        )

    def perform_create(self, serializer: BaseSerializer) -> None:
        self._audit("created", serializer.save(), {"data": redacted(serializer.initial_data)})

    def perform_update(self, serializer: BaseSerializer) -> None:
        self._audit("updated", serializer.save(), {"data": redacted(serializer.initial_data)})

    def perform_destroy(self, instance: object) -> None:
        self._audit("deleted", instance)
        instance.delete()


def erasing(erase: Callable[..., int], *args: object) -> int:
    """Run an erase of the message store's data for a deleted catalog object (inside the
    deleting transaction): 503 if the store does not answer, so the object stays."""
    try:
        return erase(*args)
    except STORE_ERRORS as exc:
        raise EngineUnavailableError(f"The message store did not answer: {exc}") from exc


class TopicViewSet(UpdateSerializerMixin, TeamScopedViewSet):
    """Topics of the caller's teams; creating one lays out its partition groups."""

    serializer_class = s.TopicSerializer
    update_serializer_class = s.TopicUpdateSerializer
    permission_classes = [permissions.IsAuthenticated, AdminOrApplication]
    audit_name = "topic"
    filterset_class = filters.TopicFilter
    search_fields = ["code", "description"]
    ordering_fields = ["code", "created_at", "partitions"]
    lookup_field = "code"
    lookup_value_regex = TOPIC_CODE_CHARS

    def base_queryset(self) -> QuerySet[Topic]:
        topics = Topic.objects.select_related("cluster", "team").prefetch_related("groups")
        return with_open_flag(topics)

    def perform_destroy(self, instance: Topic) -> None:
        """Delete the topic and, in the same transaction, every key the engine kept for
        it (a topic created later under its code would find them); if the message store
        does not answer, the topic stays (503)."""
        with transaction.atomic():
            super().perform_destroy(instance)
            erasing(erase_topic_data, instance)

    def get_serializer_context(self) -> dict:
        return {**super().get_serializer_context(), "rates": getattr(self, "_rates", {})}

    def _measure(self, topics: list[Topic]) -> None:
        """Produce rates of ``topics`` for the serializer: one batched engine call."""
        rows, _ = lag.with_rates(topics)
        self._rates = {r.topic.code: r.per_second for r in rows if r.per_second is not None}

    def list(self, request: Request, *args: object, **kwargs: object) -> Response:
        page = self.paginate_queryset(self.filter_queryset(self.get_queryset()))
        self._measure(list(page))
        return self.get_paginated_response(self.get_serializer(page, many=True).data)

    def retrieve(self, request: Request, *args: object, **kwargs: object) -> Response:
        topic = self.get_object()
        self._measure([topic])
        return Response(self.get_serializer(topic).data)

    @extend_schema(
        parameters=[stored.MessageQuery],
        responses={
            200: stored.StoredMessageSerializer(many=True),
            **error_responses(400, 401, 404),
        },
    )
    @action(detail=True, methods=["get"], pagination_class=None, filter_backends=[])
    def messages(self, request: Request, code: str | None = None) -> Response:
        """Stored messages of one partition from an index, as the message browser shows
        them: every property, the producing protocol, the producer's address."""
        topic = self.get_object()
        query = validated_query(stored.MessageQuery, request)
        return Response(stored.read_messages(topic, query))

    @extend_schema(
        parameters=[history.WindowQuery],
        responses={200: history.TopicTrafficHistorySerializer, **error_responses(400, 401, 404)},
    )
    @action(detail=True, methods=["get"], pagination_class=None, filter_backends=[])
    def traffic(self, request: Request, code: str | None = None) -> Response:
        """Per UTC minute of a window (default: the last hour, at most 24 h): messages and
        bytes produced and consumed, and the produce→store latency percentiles."""
        topic = self.get_object()
        window = validated_query(history.WindowQuery, request)
        try:
            return Response(history.topic_traffic(topic, window))
        except engine_calls.EngineUnavailable as exc:
            raise EngineUnavailableError(str(exc)) from None

    @extend_schema(
        parameters=[stored.MessageSearch],
        responses={200: stored.MessageSearchResult, **error_responses(400, 401, 404)},
    )
    @action(
        detail=True,
        methods=["get"],
        url_path="messages/search",
        pagination_class=None,
        filter_backends=[],
    )
    def search_messages(self, request: Request, code: str | None = None) -> Response:
        """Messages stored in a time window (default: the last hour), or those an id a
        client saw names — what the console's message search finds."""
        topic = self.get_object()
        query = validated_query(stored.MessageSearch, request)
        return Response(stored.search_messages(topic, query))

    @extend_schema(
        parameters=[timers.DelayedQuery],
        responses={200: timers.DelayedPage, **error_responses(400, 401, 404)},
    )
    @action(detail=True, methods=["get"], pagination_class=None, filter_backends=[])
    def delayed(self, request: Request, code: str | None = None) -> Response:
        """Delayed and timer messages the topic still holds, soonest due first; cancel
        them with an application of kind timer_cancel."""
        topic = self.get_object()
        query = validated_query(timers.DelayedQuery, request)
        return Response(timers.delayed_messages(topic, query))

    @extend_schema(
        responses={200: s.TrafficRuleSerializer(many=True), **error_responses(401, 404)},
    )
    @action(
        detail=True,
        methods=["get"],
        url_path="traffic-rules",
        pagination_class=None,
        filter_backends=[],
    )
    def traffic_rules(self, request: Request, code: str | None = None) -> Response:
        """The topic's traffic alert rules (at most 20); add and delete them with
        applications of kinds traffic_rule_add and traffic_rule_delete."""
        topic = self.get_object()
        rules = TrafficRule.objects.filter(topic=topic).select_related("topic")
        return Response(s.TrafficRuleSerializer(rules, many=True).data)


@extend_schema_view(
    create=write_schema(s.AppSerializer, created=True, detail=False),
    update=write_schema(s.AppSerializer),
    partial_update=write_schema(s.AppSerializer),
)
class AppViewSet(UpdateSerializerMixin, TeamScopedViewSet):
    """Apps of the caller's teams; tokens are shown once, when issued or rotated. Each
    team's anonymous app (``is_anonymous``) is listed too; it has no tokens."""

    serializer_class = s.AppSerializer
    update_serializer_class = s.AppUpdateSerializer
    permission_classes = [permissions.IsAuthenticated, TeamAdminWrites]
    audit_name = "app"
    filterset_class = filters.AppFilter
    search_fields = ["code", "description"]
    ordering_fields = ["code", "created_at"]
    lookup_field = "code"
    lookup_value_regex = r"[A-Za-z0-9][A-Za-z0-9._-]*"

    def base_queryset(self) -> QuerySet[App]:
        return App.objects.select_related("team").prefetch_related("tokens")

    def perform_create(self, serializer: BaseSerializer) -> None:
        """Creating an app (and so a token) for a team takes an admin of that team."""
        team = serializer.validated_data.get("team")
        if team is None or not admin_teams(self.request.user).filter(pk=team.pk).exists():
            raise PermissionDenied(TeamAdminWrites.message)
        super().perform_create(serializer)

    @extend_schema(
        responses={200: s.RefusalSerializer(many=True), **error_responses(401, 403, 404, 503)}
    )
    @action(detail=True, methods=["get"], pagination_class=None, filter_backends=[])
    def refusals(self, request: Request, code: str | None = None) -> Response:
        """The app's messages the engine refused in the last hour, per topic, most refused
        first, with why — over any protocol, on any broker (what the produce-refusal
        alert reads)."""
        app = self.get_object()
        try:
            rows = engine_calls.refusals(app.code)
        except engine_calls.EngineUnavailable as exc:
            raise EngineUnavailableError(str(exc)) from None
        data = [{"topic": r.topic, "refused": r.refused, "by_reason": r.by_reason} for r in rows]
        return Response(s.RefusalSerializer(data, many=True).data)

    @extend_schema(
        parameters=[produce_latency.HoursQuery],
        responses={
            200: produce_latency.ClientLatencySerializer(many=True),
            **error_responses(400, 401, 403, 404, 503),
        },
    )
    @action(
        detail=True,
        methods=["get"],
        url_path="produce-latency",
        pagination_class=None,
        filter_backends=[],
    )
    def produce_latency(self, request: Request, code: str | None = None) -> Response:
        """Producer statistics: per topic the app produces to and client host, how long
        the brokers took to store its messages (latency buckets and percentiles) and how
        many failed, over the last ``hours`` whole hours and the current one — over any
        protocol, on any broker; slowest p99 first."""
        query = validated_query(produce_latency.HoursQuery, request)
        app = self.get_object()
        topics = list(ProducerPolicy.objects.filter(app=app).values_list("topic__code", flat=True))
        try:
            rows = engine_calls.produce_latency(app.code, topics, query["hours"])
        except engine_calls.EngineUnavailable as exc:
            raise EngineUnavailableError(str(exc)) from None
        data = produce_latency.to_data(rows)
        return Response(produce_latency.ClientLatencySerializer(data, many=True).data)

    @extend_schema(
        responses={200: ClientSerializer(many=True), **error_responses(401, 403, 404, 503)}
    )
    @action(detail=True, methods=["get"], pagination_class=None, filter_backends=[])
    def clients(self, request: Request, code: str | None = None) -> Response:
        """The app's client hosts, over any protocol: each kind of client a host runs
        (protocol, and the language and version it stated), its live connections across
        every broker, and the topics it produced to or consumed from with when it last
        did — connected now or active in the last week."""
        app = self.get_object()
        try:
            rows = engine_calls.clients_of([app.code]).get(app.code, [])
        except engine_calls.EngineUnavailable as exc:
            raise EngineUnavailableError(str(exc)) from None
        return Response(ClientSerializer(client_rows(rows), many=True).data)

    @extend_schema(
        request=None,
        responses={200: s.AppSerializer, **error_responses(400, 401, 403, 404)},
    )
    @action(detail=True, methods=["post"], url_path="rotate-token")
    def rotate_token(self, request: Request, code: str | None = None) -> Response:
        """Issue a new token and revoke the previous ones; the response shows it once.
        An anonymous app has no tokens (400)."""
        app = self.get_object()
        if app.is_anonymous:
            raise ValidationError(NO_ANONYMOUS_TOKENS)
        app._issued_token = app.issue_token()
        self._audit("token-rotated", app)
        return Response(self.get_serializer(app).data, status=status.HTTP_200_OK)


@extend_schema_view(**policy_write_schemas(s.ProducerPolicySerializer))
class ProducerPolicyViewSet(UpdateSerializerMixin, TeamScopedViewSet):
    """Producer policies of the caller's apps."""

    serializer_class = s.ProducerPolicySerializer
    update_serializer_class = s.ProducerPolicyUpdateSerializer
    permission_classes = [permissions.IsAuthenticated, AdminOrApplication]
    audit_name = "producer"
    team_path = "app__team"
    filterset_class = filters.ProducerPolicyFilter
    search_fields = ["name", "topic__code", "app__code"]
    ordering_fields = ["name", "created_at"]

    def base_queryset(self) -> QuerySet[ProducerPolicy]:
        return ProducerPolicy.objects.select_related("topic", "app")


@extend_schema_view(**policy_write_schemas(s.ConsumerPolicySerializer))
class ConsumerPolicyViewSet(UpdateSerializerMixin, TeamScopedViewSet):
    """Consumer policies of the caller's apps."""

    serializer_class = s.ConsumerPolicySerializer
    update_serializer_class = s.ConsumerPolicyUpdateSerializer
    permission_classes = [permissions.IsAuthenticated, AdminOrApplication]
    audit_name = "consumer"
    team_path = "app__team"
    filterset_class = filters.ConsumerPolicyFilter
    search_fields = ["name", "topic__code", "app__code"]
    ordering_fields = ["name", "created_at"]

    def perform_destroy(self, instance: ConsumerPolicy) -> None:
        """Delete the policy and, in the same transaction, its group's progress, retries
        and dead letters (a policy created later for the app would resume them); if the
        message store does not answer, the policy stays (503)."""
        with transaction.atomic():
            super().perform_destroy(instance)
            erasing(erase_group_data, instance)

    def base_queryset(self) -> QuerySet[ConsumerPolicy]:
        return ConsumerPolicy.objects.select_related("topic", "app")
