"""``/api/v1/api-tokens/``: the caller's personal API tokens (everyone's for admins).

Create (the response shows the token once), list, read and revoke (DELETE) — the same as
the console's API tokens page, audited the same way.
"""

from __future__ import annotations

from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema, extend_schema_field, extend_schema_view
from rest_framework import exceptions, mixins, serializers, status, viewsets
from rest_framework.request import Request
from rest_framework.response import Response

from mqcloud.api import tokens
from mqcloud.api.errors import error_responses
from mqcloud.api.fields import StrictBooleanField, StrictCharField, StrictModelSerializer
from mqcloud.api.models import ApiToken


class ApiTokenSerializer(StrictModelSerializer):
    user = serializers.SlugRelatedField(slug_field="username", read_only=True)
    name = StrictCharField(max_length=tokens.NAME_MAX, help_text="What the token is for.")
    read_only = StrictBooleanField(
        default=False, help_text="The token authenticates GET, HEAD and OPTIONS requests only."
    )
    expires_at = serializers.DateTimeField(
        required=False,
        allow_null=True,
        default=None,
        help_text="When the token stops working (UTC; at most ten years ahead). Null: never.",
    )
    expired = serializers.BooleanField(read_only=True)
    token = serializers.SerializerMethodField(
        help_text="The token itself: only in the response that created it, never again."
    )

    class Meta:
        model = ApiToken
        fields = [
            "id",
            "name",
            "user",
            "hint",
            "read_only",
            "created_at",
            "expires_at",
            "expired",
            "last_used_at",
            "token",
        ]
        read_only_fields = ["id", "user", "hint", "created_at", "last_used_at"]

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_token(self, obj: ApiToken) -> str | None:
        return getattr(obj, "_secret", None)

    def validate_expires_at(self, value):
        try:
            tokens.check_expiry(value)
        except tokens.TokenRequestError as exc:
            raise serializers.ValidationError(str(exc)) from None
        return value


@extend_schema_view(
    list=extend_schema(responses={200: ApiTokenSerializer(many=True), **error_responses(400, 401)}),
    retrieve=extend_schema(responses={200: ApiTokenSerializer, **error_responses(401, 404)}),
    create=extend_schema(
        responses={201: ApiTokenSerializer, **error_responses(400, 401, 403)},
    ),
    destroy=extend_schema(
        summary="Revoke a token (it stops working at once)",
        responses={204: None, **error_responses(401, 403, 404)},
    ),
)
class ApiTokenViewSet(
    mixins.CreateModelMixin,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.DestroyModelMixin,
    viewsets.GenericViewSet,
):
    """Personal API tokens: your own (every user's for platform admins, who may revoke
    any). Use one as `Authorization: Bearer <token>`."""

    serializer_class = ApiTokenSerializer
    filterset_fields = ["read_only", "user__username"]
    search_fields = ["name"]
    ordering_fields = ["created_at", "name", "last_used_at", "expires_at"]

    def get_queryset(self) -> QuerySet[ApiToken]:
        if getattr(self, "swagger_fake_view", False):  # schema generation has no user
            return ApiToken.objects.none()
        return tokens.tokens_visible_to(self.request.user)

    def create(self, request: Request, *args: object, **kwargs: object) -> Response:
        body = self.get_serializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        try:
            token, secret = tokens.create_token(
                request.user,
                data["name"],
                read_only=data["read_only"],
                expires_at=data["expires_at"],
                via="api",
            )
        except tokens.TokenRequestError as exc:
            raise exceptions.ValidationError({"name": [str(exc)]}) from None
        token._secret = secret
        return Response(self.get_serializer(token).data, status=status.HTTP_201_CREATED)

    def perform_destroy(self, instance: ApiToken) -> None:
        try:
            tokens.revoke_token(self.request.user, instance, via="api")
        except PermissionError as exc:
            raise exceptions.PermissionDenied(str(exc)) from None
