"""``/api/v1/favorites/``: the caller's favorite (starred) topics, as on the console's
topic list and dashboard (:mod:`mqcloud.console.favorites`): list, star (POST
``{"topic": code}``) and unstar (DELETE ``/favorites/{code}/``, the topic's code)."""

from __future__ import annotations

from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import exceptions, mixins, serializers, status, viewsets
from rest_framework.request import Request
from rest_framework.response import Response

from brokers.topic_codes import TOPIC_CODE_CHARS
from mqcloud.api.errors import error_responses
from mqcloud.api.fields import StrictCharField, StrictModelSerializer
from mqcloud.console import access, favorites
from mqcloud.console.models import FavoriteTopic


class FavoriteSerializer(StrictModelSerializer):
    topic = StrictCharField(
        source="topic.code", max_length=255, help_text="The starred topic's code."
    )
    team = serializers.CharField(source="topic.team.name", read_only=True)

    class Meta:
        model = FavoriteTopic
        fields = ["topic", "team", "created_at"]
        read_only_fields = ["team", "created_at"]


@extend_schema_view(
    list=extend_schema(
        summary="Your favorite topics (those you may still see), by code",
        responses={200: FavoriteSerializer(many=True), **error_responses(400, 401)},
    ),
    create=extend_schema(
        summary="Star a topic you may see (starring it again changes nothing)",
        responses={
            201: FavoriteSerializer,
            200: FavoriteSerializer,
            **error_responses(400, 401, 403, 404),
        },
    ),
    destroy=extend_schema(
        summary="Unstar a topic", responses={204: None, **error_responses(401, 403, 404)}
    ),
)
class FavoriteViewSet(
    mixins.ListModelMixin,
    mixins.CreateModelMixin,
    mixins.DestroyModelMixin,
    viewsets.GenericViewSet,
):
    """Favorite topics: starred ones head the console's dashboard and filter its topic
    list (`?starred=starred`)."""

    serializer_class = FavoriteSerializer
    lookup_field = "topic__code"
    lookup_url_kwarg = "code"
    lookup_value_regex = TOPIC_CODE_CHARS
    ordering_fields = ["created_at", "topic__code"]
    search_fields = ["topic__code"]

    def get_queryset(self) -> QuerySet[FavoriteTopic]:
        if getattr(self, "swagger_fake_view", False):  # schema generation has no user
            return FavoriteTopic.objects.none()
        user = self.request.user
        return (
            FavoriteTopic.objects.filter(user_id=user.pk, topic__in=access.topics_for(user))
            .select_related("topic", "topic__team")
            .order_by("topic__code", "pk")
        )

    def create(self, request: Request, *args: object, **kwargs: object) -> Response:
        body = self.get_serializer(data=request.data)
        body.is_valid(raise_exception=True)
        code = body.validated_data["topic"]["code"]
        topic = access.topics_for(request.user).filter(code=code).first()
        if topic is None:
            raise exceptions.NotFound("No such topic among those you may see.")
        try:
            made = favorites.star(request.user, topic)
        except favorites.FavoritesFull as exc:
            raise exceptions.ValidationError({"topic": [str(exc)]}) from None
        row = self.get_queryset().get(topic=topic)
        return Response(
            self.get_serializer(row).data,
            status=status.HTTP_201_CREATED if made else status.HTTP_200_OK,
        )
