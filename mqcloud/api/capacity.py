"""``/api/v1/capacity-reports/``: the daily capacity reports of the console's capacity page
(:mod:`mqcloud.console.capacity`), for platform admins: list (newest first), read one by
its day, and make today's now (``POST /capacity-reports/make-today/``, partial)."""

from __future__ import annotations

from django.db.models import QuerySet
from django.utils import timezone
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import exceptions, serializers, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from mqcloud.api.errors import EngineUnavailableError, error_responses
from mqcloud.api.scoping import PlatformAdminsOnly
from mqcloud.approvals.services import record
from mqcloud.console import capacity, engine_calls
from mqcloud.console.models import CapacityReport


class StoreNodeSerializer(serializers.Serializer):
    name = serializers.CharField()
    used_bytes = serializers.IntegerField()
    max_bytes = serializers.IntegerField(help_text="0: no limit set.")
    keys = serializers.IntegerField()


class ClusterCapacitySerializer(serializers.Serializer):
    cluster = serializers.CharField()
    topics = serializers.IntegerField()
    partitions = serializers.IntegerField()
    stored_messages = serializers.IntegerField()
    produced_messages = serializers.IntegerField(help_text="Produced that day (rollups).")
    produced_bytes = serializers.IntegerField()


class TopTopicSerializer(serializers.Serializer):
    code = serializers.CharField()
    cluster = serializers.CharField()
    stored = serializers.IntegerField()


class CapacityReportSerializer(serializers.ModelSerializer):
    store = StoreNodeSerializer(many=True, read_only=True)
    clusters = ClusterCapacitySerializer(many=True, read_only=True)
    top_topics = TopTopicSerializer(many=True, read_only=True)

    class Meta:
        model = CapacityReport
        fields = ["day", "partial", "store", "clusters", "top_topics", "created_at", "emailed_at"]
        read_only_fields = fields


@extend_schema_view(
    list=extend_schema(
        responses={200: CapacityReportSerializer(many=True), **error_responses(400, 401, 403)}
    ),
    retrieve=extend_schema(
        responses={200: CapacityReportSerializer, **error_responses(401, 403, 404)}
    ),
)
class CapacityReportViewSet(viewsets.ReadOnlyModelViewSet):
    """Daily capacity reports, newest first (platform admins)."""

    serializer_class = CapacityReportSerializer
    lookup_field = "day"
    filterset_fields = ["partial"]
    ordering_fields = ["day"]

    def get_permissions(self) -> list:
        return [*super().get_permissions(), PlatformAdminsOnly()]

    def get_queryset(self) -> QuerySet[CapacityReport]:
        return CapacityReport.objects.order_by("-day")

    def get_object(self) -> CapacityReport:
        raw = self.kwargs["day"]
        try:
            day = timezone.datetime.strptime(raw, "%Y-%m-%d").date()
        except ValueError:
            raise exceptions.NotFound("No report of that day.") from None
        report = self.get_queryset().filter(day=day).first()
        if report is None:
            raise exceptions.NotFound("No report of that day.")
        return report

    @extend_schema(
        summary="Make today's report now (partial; it replaces an earlier one of today)",
        request=None,
        responses={200: CapacityReportSerializer, **error_responses(401, 403, 503)},
    )
    @action(detail=False, methods=["post"], url_path="make-today")
    def make_today(self, request: Request) -> Response:
        today = timezone.now().date()
        try:
            report = capacity.build(today, partial=True)
        except engine_calls.EngineUnavailable as exc:
            raise EngineUnavailableError(str(exc)) from None
        record(request.user, "capacity-report-made", f"capacity:{today.isoformat()}")
        return Response(self.get_serializer(report).data)
