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

from mqcloud.alerts import channels
from mqcloud.alerts.delivery import waiting_counts
from mqcloud.api.errors import error_responses
from mqcloud.api.scoping import PlatformAdminsOnly
from mqcloud.approvals.services import record


class AlertChannelSerializer(serializers.Serializer):
    name = serializers.ChoiceField(choices=["mail", "webhook", "sms"])
    label = serializers.CharField()
    address = serializers.CharField(
        help_text="Where it goes: the SMTP server, or a URL without its path and query."
    )
    paused_seconds = serializers.IntegerField(
        allow_null=True, help_text="Seconds left of its pause after a failure; null: working."
    )
    waiting = serializers.IntegerField(help_text="Alerts waiting to be sent through it.")


def _rows() -> list[dict]:
    waiting = waiting_counts()
    return [
        {
            "name": s.name,
            "label": s.label,
            "address": s.shown_address,
            "paused_seconds": s.paused_seconds,
            "waiting": waiting[s.name],
        }
        for s in channels.states()
    ]


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
        return Response(AlertChannelSerializer(_rows(), many=True).data)

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
        found = channels.find(name)
        if found is None:
            raise exceptions.NotFound("No such alert channel is configured.")
        channels.resume(name, found[3])
        record(request.user, "alert-channel-resumed", f"alert-channel:{name}")
        return Response(AlertChannelSerializer(self._row(name)).data)

    @staticmethod
    def _row(name: str) -> dict:
        row = next((r for r in _rows() if r["name"] == name), None)
        if row is None:
            raise exceptions.NotFound("No such alert channel is configured.")
        return row
