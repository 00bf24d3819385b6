"""REST endpoints of the client listing (:mod:`brokers.engine.clients`): an app's
client hosts (``GET /api/v1/apps/{code}/clients/``, on :class:`~.views.AppViewSet`) and
the platform's client inventory for its admins (``GET /api/v1/clients/``)."""

from __future__ import annotations

from collections.abc import Iterable

from drf_spectacular.utils import extend_schema
from rest_framework import permissions, serializers, viewsets
from rest_framework.request import Request
from rest_framework.response import Response

from brokers.engine import ClientRow, InventoryRow
from mqcloud.api.errors import EngineUnavailableError, error_responses
from mqcloud.api.query import validated_query
from mqcloud.api.scoping import PlatformAdminsOnly
from mqcloud.console import engine_calls


class ClientTopicSerializer(serializers.Serializer):
    """A topic a client host produced to or consumed from, and when it last did."""

    topic = serializers.CharField()
    role = serializers.ChoiceField(choices=["produce", "consume"])
    last_ms = serializers.IntegerField(help_text="When it last did (epoch ms, to 30 s).")


class ClientSerializer(serializers.Serializer):
    """One host of an app with one kind of client."""

    host = serializers.CharField()
    protocol = serializers.CharField(
        help_text="jmq4, zbus, vibemq, vibemq-ws, http-mq; '' unknown."
    )
    language = serializers.CharField(allow_blank=True, help_text="As the client stated it.")
    version = serializers.CharField(allow_blank=True, help_text="As the client stated it.")
    connections = serializers.IntegerField(help_text="Live connections, over every process.")
    topics = ClientTopicSerializer(many=True)


class ClientKindSerializer(serializers.Serializer):
    """One kind of client across the platform."""

    protocol = serializers.CharField(allow_blank=True)
    language = serializers.CharField(allow_blank=True)
    version = serializers.CharField(allow_blank=True)
    apps = serializers.ListField(child=serializers.CharField())
    hosts = serializers.ListField(child=serializers.CharField())
    connections = serializers.IntegerField()
    last_ms = serializers.IntegerField(help_text="When one last produced or consumed (0: never).")


class InventoryQuery(serializers.Serializer):
    protocol = serializers.CharField(required=False, allow_blank=True, max_length=32)


def client_rows(rows: Iterable[ClientRow]) -> list[dict]:
    """``rows`` as :class:`ClientSerializer` data."""
    return [
        {
            "host": r.host,
            "protocol": r.protocol,
            "language": r.language,
            "version": r.version,
            "connections": r.connections,
            "topics": [{"topic": t, "role": role, "last_ms": at} for t, role, at in r.topics],
        }
        for r in rows
    ]


def kind_rows(rows: Iterable[InventoryRow]) -> list[dict]:
    return [
        {
            "protocol": r.protocol,
            "language": r.language,
            "version": r.version,
            "apps": sorted(r.apps),
            "hosts": sorted(r.hosts),
            "connections": r.connections,
            "last_ms": r.last_ms,
        }
        for r in rows
    ]


class ClientInventoryViewSet(viewsets.ViewSet):
    """The platform's client inventory (platform admins)."""

    permission_classes = [permissions.IsAuthenticated, PlatformAdminsOnly]

    @extend_schema(
        parameters=[InventoryQuery],
        responses={200: ClientKindSerializer(many=True), **error_responses(400, 401, 403, 503)},
    )
    def list(self, request: Request) -> Response:
        """Every kind of client (protocol, language, version) connected or active in the
        last week, with its apps and hosts, live connections and last activity; the most
        connected first. ``protocol`` narrows it to one."""
        query = validated_query(InventoryQuery, request)
        try:
            rows = engine_calls.client_inventory()
        except engine_calls.EngineUnavailable as exc:
            raise EngineUnavailableError(str(exc)) from None
        if "protocol" in query:
            rows = [r for r in rows if r.protocol == query["protocol"]]
        return Response(ClientKindSerializer(kind_rows(rows), many=True).data)
