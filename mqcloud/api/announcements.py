"""``/api/v1/announcements/``: the platform admins' announcements to every user, as on the
console's announcements page (:mod:`mqcloud.console.announcements`): list and read
(``?state=running`` for those running now), post and withdraw (platform admins)."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.db.models import QuerySet
from django_filters import rest_framework as filters
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import exceptions, mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from mqcloud.api.errors import error_responses
from mqcloud.api.fields import StrictCharField, StrictModelSerializer
from mqcloud.api.query import StrictFilterSet
from mqcloud.console import access, announcements
from mqcloud.console.models import ANNOUNCEMENT_TEXT_MAX, Announcement


class AnnouncementSerializer(StrictModelSerializer):
    text = StrictCharField(max_length=ANNOUNCEMENT_TEXT_MAX)
    level = serializers.ChoiceField(choices=Announcement.Level.choices, default="info")
    starts_at = serializers.DateTimeField(
        required=False, allow_null=True, default=None, help_text="Null or left out: now."
    )
    ends_at = serializers.DateTimeField(
        required=False, allow_null=True, default=None, help_text="Null: until withdrawn."
    )
    created_by = serializers.SlugRelatedField(
        slug_field="username", read_only=True, allow_null=True
    )
    state = serializers.SerializerMethodField(
        help_text="scheduled, running, ended or withdrawn (now)."
    )

    class Meta:
        model = Announcement
        fields = [
            "id",
            "text",
            "level",
            "starts_at",
            "ends_at",
            "withdrawn_at",
            "state",
            "created_by",
            "created_at",
        ]
        read_only_fields = ["id", "withdrawn_at", "state", "created_by", "created_at"]

    def get_state(self, obj: Announcement) -> str:
        return announcements.state(obj)


class AnnouncementFilter(StrictFilterSet):
    state = filters.ChoiceFilter(
        choices=[(v, v) for v in announcements.STATES],
        method="filter_state",
        help_text="scheduled, running, ended or withdrawn (now).",
    )

    class Meta:
        model = Announcement
        fields = ["level", "state"]

    def filter_state(self, queryset: QuerySet, name: str, value: str) -> QuerySet:
        return queryset.filter(announcements.in_state(value))


@extend_schema_view(
    list=extend_schema(
        responses={200: AnnouncementSerializer(many=True), **error_responses(400, 401)},
    ),
    retrieve=extend_schema(responses={200: AnnouncementSerializer, **error_responses(401, 404)}),
    create=extend_schema(
        summary="Post an announcement to every user (platform admins)",
        responses={201: AnnouncementSerializer, **error_responses(400, 401, 403)},
    ),
)
class AnnouncementViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    viewsets.GenericViewSet,
):
    """Announcements of the platform admins, newest first."""

    serializer_class = AnnouncementSerializer
    filterset_class = AnnouncementFilter
    search_fields = ["text"]
    ordering_fields = ["starts_at", "created_at"]

    def get_queryset(self) -> QuerySet[Announcement]:
        if getattr(self, "swagger_fake_view", False):  # schema generation has no user
            return Announcement.objects.none()
        return Announcement.objects.select_related("created_by").order_by("-starts_at", "-pk")

    def create(self, request: Request, *args: object, **kwargs: object) -> Response:
        if not access.is_platform_admin(request.user):
            raise exceptions.PermissionDenied("Only platform admins post announcements.")
        body = self.get_serializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        try:
            item = announcements.post(
                request.user, data["text"], data["level"], data["starts_at"], data["ends_at"]
            )
        except ValidationError as exc:
            fields = exc.message_dict if hasattr(exc, "error_dict") else {"text": exc.messages}
            raise exceptions.ValidationError(fields) from None
        return Response(self.get_serializer(item).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        summary="Withdraw an announcement at once (platform admins)",
        request=None,
        responses={200: AnnouncementSerializer, **error_responses(401, 403, 404)},
    )
    @action(detail=True, methods=["post"])
    def withdraw(self, request: Request, pk: str | None = None) -> Response:
        if not access.is_platform_admin(request.user):
            raise exceptions.PermissionDenied("Only platform admins withdraw announcements.")
        item = self.get_object()
        announcements.withdraw(request.user, item)
        return Response(self.get_serializer(item).data)
