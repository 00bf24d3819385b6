"""``/api/v1/alert-channels/``: the alert channels of the console's alerts page (e-mail,
the webhook, text messages, as configured) for platform admins — each with its pause
after a failure and how many alerts wait for it — and ending a pause once the channel is
fixed (``POST /alert-channels/{name}/resume/``, audited; what waited goes with the next
minute's retry run)."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import exceptions, serializers, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from mqcloud.api.errors import error_responses
from mqcloud.api.scoping import PlatformAdminsOnly
from mqcloud.console import alert_channels


class AlertChannelSerializer(serializers.Serializer):
    name = serializers.ChoiceField(choices=["mail", "webhook", "sms"], source="state.name")
    label = serializers.CharField(source="state.label")
    address = serializers.CharField(
        source="state.shown_address",
        help_text="Where it goes: the SMTP server, or a URL without its path and query.",
    )
    paused_seconds = serializers.IntegerField(
        source="state.paused_seconds",
        allow_null=True,
        help_text="Seconds left of its pause after a failure; null: working.",
    )
    waiting = serializers.IntegerField(help_text="Alerts waiting to be sent through it.")


NAME = OpenApiParameter(
    "name", str, OpenApiParameter.PATH, description="mail, webhook or sms (when configured)."
)


class AlertChannelViewSet(viewsets.ViewSet):
    """The configured alert channels (platform admins)."""

    lookup_field = "name"
    serializer_class = AlertChannelSerializer

    def get_permissions(self) -> list:
        return [*super().get_permissions(), PlatformAdminsOnly()]

    @extend_schema(responses={200: AlertChannelSerializer(many=True), **error_responses(401, 403)})
    def list(self, request: Request) -> Response:
        return Response(AlertChannelSerializer(alert_channels.rows(), many=True).data)

    @extend_schema(
        parameters=[NAME],
        responses={200: AlertChannelSerializer, **error_responses(401, 403, 404)},
    )
    def retrieve(self, request: Request, name: str = "") -> Response:
        return Response(AlertChannelSerializer(self._row(name)).data)

    @extend_schema(
        summary="End the channel's pause (it is fixed)",
        parameters=[NAME],
        request=None,
        responses={200: AlertChannelSerializer, **error_responses(401, 403, 404)},
    )
    @action(detail=True, methods=["post"])
    def resume(self, request: Request, name: str = "") -> Response:
        if alert_channels.resume(request.user, name) is None:
            raise exceptions.NotFound("No such alert channel is configured.")
        return Response(AlertChannelSerializer(self._row(name)).data)

    @staticmethod
    def _row(name: str) -> alert_channels.ChannelRow:
        row = next((r for r in alert_channels.rows() if r.state.name == name), None)
        if row is None:
            raise exceptions.NotFound("No such alert channel is configured.")
        return row
