"""API of applications, approvals, the audit trail, notifications and approval settings."""

from __future__ import annotations

from django.db.models import Q, QuerySet
from django.http.response import HttpResponseBase
from django_filters import rest_framework as filters
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiExample,
    extend_schema,
    extend_schema_view,
    inline_serializer,
)
from rest_framework import mixins, permissions, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import NotFound, PermissionDenied
from rest_framework.request import Request
from rest_framework.response import Response

from mqcloud.api.errors import error_responses
from mqcloud.api.fields import StrictCharField, StrictModelSerializer
from mqcloud.api.query import IdFilter, StrictFilterSet
from mqcloud.api.scoping import is_platform_admin, user_teams
from mqcloud.approvals import kinds, services
from mqcloud.approvals.models import (
    AUTO_APPROVABLE,
    Application,
    ApprovalSettings,
    AuditEvent,
    Kind,
    Notification,
)
from mqcloud.approvals.secrets import redacted
from mqcloud.exports import download
from mqcloud.operations import progress as operation_progress

PAYLOAD_HELP = "What the kind needs (an example of each is in the request examples):\n\n" + (
    "\n".join(f"- `{kind}`: {text}" for kind, (text, _) in kinds.PAYLOADS.items())
)
PAYLOAD_EXAMPLES = [
    OpenApiExample(
        kind,
        summary=Kind(kind).label,
        value={"kind": kind, "payload": example},
        request_only=True,
    )
    for kind, (_, example) in kinds.PAYLOADS.items()
]


class ApplicationSerializer(StrictModelSerializer):
    applicant = serializers.SlugRelatedField(slug_field="username", read_only=True)
    decided_by = serializers.SlugRelatedField(
        slug_field="username", read_only=True, allow_null=True
    )
    team = serializers.SlugRelatedField(slug_field="name", read_only=True)
    kind = serializers.ChoiceField(choices=Kind.choices)
    payload = serializers.JSONField(help_text=PAYLOAD_HELP)

    def to_representation(self, instance: Application) -> dict:
        """Secrets in the payload (a zbus token) are shown as set or cleared, never."""
        data = super().to_representation(instance)
        data["payload"] = redacted(data["payload"])
        return data

    class Meta:
        model = Application
        fields = [
            "id",
            "kind",
            "payload",
            "target",
            "status",
            "applicant",
            "team",
            "decided_by",
            "decided_at",
            "auto_approved",
            "reason",
            "result",
            "error",
            "created_at",
            "updated_at",
        ]
        read_only_fields = [
            "target",
            "status",
            "reason",
            "result",
            "error",
            "decided_at",
            "auto_approved",
            "created_at",
            "updated_at",
        ]

    def create(self, validated_data: dict) -> Application:
        return services.submit(
            self.context["request"].user, validated_data["kind"], validated_data["payload"]
        )


class RejectSerializer(serializers.Serializer):
    reason = StrictCharField(max_length=2000)


def _workflow(call) -> Response:
    try:
        return call()
    except services.WorkflowError as exc:
        raise PermissionDenied(str(exc)) from None


class ApplicationFilter(StrictFilterSet):
    """Filters of the applications: ``team`` and ``applicant`` by name."""

    team = filters.CharFilter(field_name="team__name", max_length=100, help_text="Team name.")
    applicant = filters.CharFilter(
        field_name="applicant__username", max_length=150, help_text="Applicant's username."
    )

    class Meta:
        model = Application
        fields = ["kind", "status", "team", "applicant", "team__name", "applicant__username"]


@extend_schema_view(
    create=extend_schema(
        summary="Apply for a change (auto-approved kinds execute at once)",
        examples=PAYLOAD_EXAMPLES,
    )
)
class ApplicationViewSet(
    mixins.CreateModelMixin,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    viewsets.GenericViewSet,
):
    """Applications of the caller's teams (all of them for admins), and the decisions."""

    serializer_class = ApplicationSerializer
    filterset_class = ApplicationFilter
    search_fields = ["target"]
    ordering_fields = ["created_at", "status", "kind"]

    def get_queryset(self) -> QuerySet[Application]:
        queryset = Application.objects.select_related("applicant", "decided_by", "team")
        if is_platform_admin(self.request.user):
            return queryset
        return queryset.filter(team__in=user_teams(self.request.user))

    @extend_schema(request=None, responses=ApplicationSerializer)
    @action(detail=True, methods=["post"])
    def approve(self, request: Request, pk: str | None = None) -> Response:
        """Approve and execute (platform admins)."""
        app = self.get_object()
        return _workflow(
            lambda: Response(self.get_serializer(services.approve(app, request.user)).data)
        )

    @extend_schema(request=RejectSerializer, responses=ApplicationSerializer)
    @action(detail=True, methods=["post"])
    def reject(self, request: Request, pk: str | None = None) -> Response:
        """Reject with a reason (platform admins)."""
        app = self.get_object()
        body = RejectSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        return _workflow(
            lambda: Response(
                self.get_serializer(
                    services.reject(app, request.user, body.validated_data["reason"])
                ).data
            )
        )

    @extend_schema(
        request=None,
        responses=inline_serializer(
            "OperationProgress",
            {
                "task_id": serializers.CharField(),
                "state": serializers.CharField(),
                "done": serializers.IntegerField(required=False),
                "total": serializers.IntegerField(required=False),
            },
        ),
    )
    @action(detail=True, methods=["get"])
    def progress(self, request: Request, pk: str | None = None) -> Response:
        """Progress of the operation an approved application started (offset resets)."""
        app = self.get_object()
        task_id = app.result.get("task_id") if isinstance(app.result, dict) else None
        if not task_id:
            raise NotFound("This application started no long operation.")
        return Response(operation_progress(task_id))

    @extend_schema(
        request=None,
        responses={
            (200, "application/gzip"): OpenApiTypes.BINARY,
            **error_responses(401, 404),
        },
    )
    @action(detail=True, methods=["get"])
    def export(self, request: Request, pk: str | None = None) -> HttpResponseBase:
        """The gzipped JSON Lines file an approved message_export application wrote (one
        message a line); 404 while it is written and once removed (after
        MESSAGE_EXPORT_RETENTION_DAYS)."""
        app = self.get_object()
        response = download(app)
        if response is None:
            raise NotFound("No export file: not written yet, or removed.")
        return response

    @extend_schema(request=None, responses=ApplicationSerializer)
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, pk: str | None = None) -> Response:
        """Withdraw a pending application (its applicant or an admin)."""
        app = self.get_object()
        return _workflow(
            lambda: Response(self.get_serializer(services.cancel(app, request.user)).data)
        )


class AuditEventSerializer(serializers.ModelSerializer):
    # Null for the system's own actions and for events of no team.
    actor = serializers.SlugRelatedField(slug_field="username", read_only=True, allow_null=True)
    team = serializers.SlugRelatedField(slug_field="name", read_only=True, allow_null=True)

    def to_representation(self, instance: AuditEvent) -> dict:
        """Secrets in the detail (a zbus token) are shown as set or cleared, never."""
        data = super().to_representation(instance)
        data["detail"] = redacted(data["detail"])
        return data

    class Meta:
        model = AuditEvent
        fields = ["id", "created_at", "actor", "action", "target", "team", "application", "detail"]
        read_only_fields = fields


class AuditEventFilter(StrictFilterSet):
    """Filters of the audit trail; ``application`` takes any id (none matching: empty)."""

    application = IdFilter(field_name="application_id")
    team = filters.CharFilter(field_name="team__name", max_length=100, help_text="Team name.")
    actor = filters.CharFilter(
        field_name="actor__username", max_length=150, help_text="Who acted (username)."
    )

    class Meta:
        model = AuditEvent
        fields = ["action", "team", "actor", "team__name", "actor__username", "application"]


class AuditEventViewSet(viewsets.ReadOnlyModelViewSet):
    """The audit trail: the caller's teams' events and the caller's own actions
    (everything for admins)."""

    serializer_class = AuditEventSerializer
    filterset_class = AuditEventFilter
    search_fields = ["target"]
    ordering_fields = ["created_at"]

    def get_queryset(self) -> QuerySet[AuditEvent]:
        queryset = AuditEvent.objects.select_related("actor", "team")
        if getattr(self, "swagger_fake_view", False):  # schema generation has no user
            return queryset.none()
        if is_platform_admin(self.request.user):
            return queryset
        user = self.request.user
        return queryset.filter(Q(team__in=user_teams(user)) | Q(actor=user))


class NotificationSerializer(StrictModelSerializer):
    class Meta:
        model = Notification
        fields = ["id", "message", "application", "read", "created_at"]
        read_only_fields = ["id", "message", "application", "created_at"]


class NotificationViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.UpdateModelMixin,
    viewsets.GenericViewSet,
):
    """The caller's notifications; PATCH {"read": true} marks one read."""

    serializer_class = NotificationSerializer
    filterset_fields = ["read"]
    http_method_names = ["get", "patch", "post", "head", "options"]

    def get_queryset(self) -> QuerySet[Notification]:
        if getattr(self, "swagger_fake_view", False):  # schema generation has no user
            return Notification.objects.none()
        return Notification.objects.filter(user=self.request.user)

    @extend_schema(
        request=None,
        responses=inline_serializer("MarkedRead", {"marked": serializers.IntegerField()}),
    )
    @action(detail=False, methods=["post"], url_path="mark-all-read")
    def mark_all_read(self, request: Request) -> Response:
        marked = self.get_queryset().filter(read=False).update(read=True)
        return Response({"marked": marked}, status=status.HTTP_200_OK)


class IsPlatformAdmin(permissions.BasePermission):
    message = "Only platform admins change approval settings."

    def has_permission(self, request, view) -> bool:
        return request.method in permissions.SAFE_METHODS or is_platform_admin(request.user)


class ApprovalSettingsSerializer(StrictModelSerializer):
    auto_approve = serializers.ListField(
        child=serializers.ChoiceField(choices=AUTO_APPROVABLE),
        allow_empty=True,
        help_text="Kinds approved as they are filed (become_admin never is).",
    )

    class Meta:
        model = ApprovalSettings
        fields = ["auto_approve", "frozen"]


class ApprovalSettingsView(
    mixins.RetrieveModelMixin, mixins.UpdateModelMixin, viewsets.GenericViewSet
):
    """The platform's approval switches: auto-approved kinds and the approval freeze."""

    serializer_class = ApprovalSettingsSerializer
    permission_classes = [permissions.IsAuthenticated, IsPlatformAdmin]

    def get_object(self) -> ApprovalSettings:
        return ApprovalSettings.current()

    def perform_update(self, serializer: ApprovalSettingsSerializer) -> None:
        settings = serializer.save()
        services.record(
            self.request.user,
            "approval-settings",
            "approval-settings",
            detail={"auto_approve": settings.auto_approve, "frozen": settings.frozen},
        )
