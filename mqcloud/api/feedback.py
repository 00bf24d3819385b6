"""``/api/v1/feedback/``: feedback to the platform admins, as on the console's feedback
page (:mod:`mqcloud.console.feedback`): send, list and read (your own; everyone's for
platform admins), and answer (``POST /feedback/{id}/answer/``, platform admins)."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import exceptions, mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from mqcloud.api.errors import error_responses
from mqcloud.api.fields import StrictCharField, StrictModelSerializer
from mqcloud.console import access, feedback
from mqcloud.console.models import FEEDBACK_ANSWER_MAX, FEEDBACK_TEXT_MAX, Feedback


class FeedbackSerializer(StrictModelSerializer):
    author = serializers.SlugRelatedField(
        slug_field="username", read_only=True, allow_null=True, help_text="Null: a deleted user."
    )
    answered_by = serializers.SlugRelatedField(
        slug_field="username",
        read_only=True,
        allow_null=True,
        help_text="The platform admin who answered (null: not answered, or a deleted user).",
    )
    text = StrictCharField(max_length=FEEDBACK_TEXT_MAX, help_text="What you tell the admins.")
    page = StrictCharField(
        max_length=300,
        required=False,
        default="",
        allow_blank=True,
        help_text="The console path it concerns, if any (anything else is dropped).",
    )

    class Meta:
        model = Feedback
        fields = [
            "id",
            "author",
            "text",
            "page",
            "state",
            "answer",
            "answered_by",
            "created_at",
            "answered_at",
        ]
        read_only_fields = [
            "id",
            "author",
            "state",
            "answer",
            "answered_by",
            "created_at",
            "answered_at",
        ]


class AnswerSerializer(serializers.Serializer):
    answer = StrictCharField(max_length=FEEDBACK_ANSWER_MAX, help_text="The answer.")


@extend_schema_view(
    list=extend_schema(responses={200: FeedbackSerializer(many=True), **error_responses(400, 401)}),
    retrieve=extend_schema(responses={200: FeedbackSerializer, **error_responses(401, 404)}),
    create=extend_schema(
        summary="Send feedback to the platform admins",
        responses={201: FeedbackSerializer, **error_responses(400, 401, 403, 429)},
    ),
)
class FeedbackViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    viewsets.GenericViewSet,
):
    """Feedback: your own (everyone's for platform admins, who answer it)."""

    serializer_class = FeedbackSerializer
    filterset_fields = ["state"]
    search_fields = ["text", "answer"]
    ordering_fields = ["created_at", "state"]

    def get_queryset(self) -> QuerySet[Feedback]:
        if getattr(self, "swagger_fake_view", False):  # schema generation has no user
            return Feedback.objects.none()
        return feedback.visible_to(self.request.user)

    def create(self, request: Request, *args: object, **kwargs: object) -> Response:
        body = self.get_serializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        try:
            item = feedback.send(request.user, data["text"], data["page"])
        except ValidationError as exc:
            raise exceptions.ValidationError({"text": exc.messages}) from None
        except feedback.TooMuchFeedback as exc:
            raise exceptions.Throttled(detail=str(exc)) from None
        return Response(self.get_serializer(item).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        summary="Answer feedback (platform admins); its author is notified",
        request=AnswerSerializer,
        responses={200: FeedbackSerializer, **error_responses(400, 401, 403, 404)},
    )
    @action(detail=True, methods=["post"])
    def answer(self, request: Request, pk: str | None = None) -> Response:
        if not access.is_platform_admin(request.user):
            raise exceptions.PermissionDenied("Only platform admins answer feedback.")
        item = self.get_object()
        body = AnswerSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            feedback.answer(request.user, item, body.validated_data["answer"])
        except ValidationError as exc:
            raise exceptions.ValidationError({"answer": exc.messages}) from None
        return Response(self.get_serializer(item).data)
